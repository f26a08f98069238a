//! Entity suggestions: names that recur in a partition's messages, proposed as entity
//! candidates for review (never written as knowledge directly). Above both `knowledge` (the
//! entities it checks against) and `candidates` (where its proposals go), so neither of
//! those needs the other's module for it.

use std::collections::{BTreeMap, HashSet};

use cairn_models::knowledge::{key, normalize_name, EntityType};
use cairn_models::{PointKind, Ref, Scope, StoredPoint};
use cairn_store::Filter;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::engine::Engine;
use crate::error::ServiceError;
use crate::records::scan;
use crate::Operation;

/// The proposing agent of [`Engine::suggest_entities`] when a person or key runs it (an
/// agent proposes as itself).
pub const EXTRACTOR_AGENT: &str = "cairn-extractor";

/// Most entity candidates one suggestion run proposes.
pub const MAX_SUGGESTIONS: usize = 50;

/// The names a message mentions: capitalized phrases of letters (no digits, codes, amounts
/// or quotes), as the recall identifier extractor finds them. A one-word name counts only
/// where it is capitalized inside a sentence ("met Morag", not "Thanks!" at the start), so
/// sentence-initial words are not taken for names.
fn names_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // The identifier extractor keeps "X and Y" together (one query aspect); here they are
    // two names.
    let phrases: Vec<String> = cairn_recall::query::identifiers(text, 32)
        .into_iter()
        .flat_map(|p| {
            p.split(" and ")
                .map(|x| x.trim().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    for cand in phrases {
        let words: Vec<&str> = cand.split_whitespace().collect();
        let is_phrase = !words.is_empty()
            && words.iter().all(|w| {
                w.chars().next().is_some_and(char::is_uppercase)
                    && w.chars()
                        .all(|c| c.is_alphabetic() || c == '\'' || c == '’' || c == '-')
            });
        if !is_phrase {
            continue;
        }
        if words.len() == 1 && !mid_sentence(text, &cand) {
            continue;
        }
        // A phrase that starts a sentence may begin with a word capitalized only for that
        // ("Ask Noor Haddad"): its tail is a candidate too; counting decides.
        let mut variants = vec![cand.clone()];
        if words.len() > 1 && !mid_sentence(text, &cand) {
            variants.push(words[1..].join(" "));
        }
        for v in variants {
            if !out.iter().any(|o| o.eq_ignore_ascii_case(&v)) {
                out.push(v);
            }
        }
    }
    out
}

/// Whether `text` names `name` (case-sensitively for names, case-insensitively for the
/// normalized keys they are compared by), as whole words.
fn mentions(text: &str, name: &str) -> bool {
    let hay = if name.chars().any(char::is_uppercase) {
        text.to_string()
    } else {
        text.to_lowercase()
    };
    hay.match_indices(name).any(|(i, _)| {
        let before = hay[..i].chars().next_back();
        let after = hay[i + name.len()..].chars().next();
        !before.is_some_and(char::is_alphanumeric) && !after.is_some_and(char::is_alphanumeric)
    })
}

/// Whether `word` occurs in `text` somewhere other than at the start of a sentence.
fn mid_sentence(text: &str, word: &str) -> bool {
    text.match_indices(word).any(|(i, _)| {
        let before = text[..i].trim_end();
        !(before.is_empty() || before.ends_with(['.', '!', '?', ':', '"', '“', '\n']))
    })
}

impl Engine {
    /// Proposes entity candidates from stored messages, LLM-free: names (capitalized
    /// phrases) mentioned in at least `min_mentions` messages and not yet known as an
    /// entity, each citing the messages that mention it. They go through the review queue
    /// like any third party's claim: nothing is known until a trusted caller approves. The
    /// type is `person` for a name that is also a message speaker, else `other`.
    /// Idempotent: the same messages give the same candidates (`created: false`).
    pub async fn suggest_entities(
        &self,
        who: &Principal,
        req: SuggestRequest,
    ) -> Result<Vec<Suggestion>, ServiceError> {
        crate::access::admit(who, &req.scope, Operation::Read)?;
        let partition = req.scope.partition();
        let mut filter = Filter::new().eq("kind", PointKind::Message.as_str());
        if let Some(c) = &req.conversation_id {
            cairn_models::scope::validate_component("conversation_id", c)?;
            filter = filter.eq("conversation_id", c.as_str());
        }
        let min = req.min_mentions.unwrap_or(2).max(1);
        let limit = req.limit.unwrap_or(10).clamp(1, MAX_SUGGESTIONS);
        let mut messages: Vec<StoredPoint> = self
            .store
            .scroll_all(&partition, filter)
            .await?
            .into_iter()
            .map(|h| h.point)
            .collect();
        messages.sort_by(|a, b| {
            (a.conversation_id.as_deref(), a.seq).cmp(&(b.conversation_id.as_deref(), b.seq))
        });
        let speakers: HashSet<String> = messages
            .iter()
            .filter_map(|m| m.speaker.as_deref().map(normalize_name))
            .collect();
        // The candidate names, then every message mentioning each (a name found in one
        // message is counted wherever it occurs, e.g. also at a sentence start).
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for m in &messages {
            for name in names_in(m.text.as_deref().unwrap_or_default()) {
                names.entry(normalize_name(&name)).or_insert(name);
            }
        }
        let mut ranked: Vec<(String, String, Vec<Ref>)> = names
            .into_iter()
            .map(|(key, name)| {
                let refs: Vec<Ref> = messages
                    .iter()
                    .filter(|m| mentions(m.text.as_deref().unwrap_or_default(), &name))
                    .map(StoredPoint::to_ref)
                    .collect();
                (key, name, refs)
            })
            .filter(|(_, _, refs)| refs.len() >= min)
            .collect();
        // A name inside a longer one mentioned as often ("Dunbar" in "Morag Dunbar") is that
        // name, not another entity.
        let snapshot = ranked.clone();
        ranked.retain(|(key, _, refs)| {
            !snapshot.iter().any(|(other, _, other_refs)| {
                other != key && mentions(other, key) && other_refs.len() >= refs.len()
            })
        });
        ranked.sort_by(|a, b| b.2.len().cmp(&a.2.len()).then_with(|| a.0.cmp(&b.0)));
        let source_agent = who
            .agent()
            .map(str::to_string)
            .unwrap_or_else(|| EXTRACTOR_AGENT.to_string());
        let mut out = Vec::new();
        for (key, name, refs) in ranked {
            if out.len() >= limit {
                break;
            }
            let known = scan(self, &partition, PointKind::Entity, Some(key::name(&name))).await?;
            if !known.is_empty() {
                continue;
            }
            let mentions = refs.len();
            let entity_type = if speakers.contains(&key) {
                EntityType::Person
            } else {
                EntityType::Other
            };
            let evidence: Vec<String> = refs
                .iter()
                .take(crate::candidates::MAX_EVIDENCE)
                .map(ToString::to_string)
                .collect();
            let proposed = self
                .propose(
                    who,
                    crate::candidates::CandidateRequest {
                        scope: req.scope.clone(),
                        source_agent: source_agent.clone(),
                        memory_type: "entity".into(),
                        content: format!("{name} is named in the stored conversation"),
                        evidence_refs: evidence,
                        // More mentions, more confidence; never certain.
                        confidence: (mentions as f64 / (mentions as f64 + 2.0)).min(0.9),
                        metadata: None,
                        knowledge: Some(cairn_models::knowledge::ProposedKnowledge::Entity {
                            name: name.clone(),
                            entity_type: entity_type.as_str().into(),
                            description: None,
                            aliases: Vec::new(),
                        }),
                    },
                )
                .await?;
            out.push(Suggestion {
                name,
                entity_type,
                mentions,
                created: proposed.created,
                candidate: proposed.candidate,
            });
        }
        Ok(out)
    }
}

/// `POST /v1/entities/suggest` body.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SuggestRequest {
    pub scope: Scope,
    /// Only this conversation's messages (default: every message of the partition).
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Names mentioned in at least this many messages (default 2).
    #[serde(default)]
    pub min_mentions: Option<usize>,
    /// At most this many candidates (default 10, at most 50).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// One entity candidate [`Engine::suggest_entities`] proposed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Suggestion {
    pub name: String,
    #[serde(rename = "type")]
    pub entity_type: EntityType,
    /// Messages mentioning it.
    pub mentions: usize,
    /// False when the same candidate was proposed before.
    pub created: bool,
    pub candidate: crate::candidates::CandidateView,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_capitalized_phrases_not_sentence_starts() {
        let names = names_in(
            "Thanks! I met Morag Dunbar at the Skerryvore lighthouse with Ewan. Tomorrow we sail at 10am, ticket ZX-4471, \"the big one\".",
        );
        assert_eq!(names, ["Morag Dunbar", "Skerryvore", "Ewan"]);
        // A one-word name only at sentence starts is not taken; in mid-sentence it is.
        assert!(names_in("Oban is lovely.").is_empty());
        assert_eq!(names_in("We sailed from Oban."), ["Oban"]);
    }
}
