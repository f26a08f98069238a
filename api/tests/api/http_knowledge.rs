//! Knowledge and reasoning memory over HTTP: entities (idempotent writes, names and aliases,
//! search, merges), relationships and traversal, preferences, facts (conflicts,
//! supersession, predicate declarations, history, evidence), traces (steps, tool calls,
//! outcomes, similar traces, tool statistics), messages by id and by meaning, forgetting
//! every kind, scope isolation, and recall citing them. Through `tower::ServiceExt::oneshot`,
//! on the real engine and model; every response is checked against the OpenAPI document.

// Test helpers may panic on setup failures: that is a test failure, not a bug to handle.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use axum::http::StatusCode;
use cairn_api::Auth;
use serde_json::{json, Value};

use crate::common::{call, checked, code, refs_of, scope, test_app, TestApp, Q};

/// Another tenant, and another user of the same tenant.
const OTHER_TENANT: &str = "tenant=globex&user=alice&namespace=kb";
const OTHER_USER: &str = "tenant=acme&user=bob&namespace=kb";

async fn post(app: &TestApp, template: &str, uri: &str, body: Value) -> (StatusCode, Value) {
    checked(app, "POST", template, uri, Some(body)).await
}

async fn get(app: &TestApp, template: &str, uri: &str) -> (StatusCode, Value) {
    checked(app, "GET", template, uri, None).await
}

fn id(v: &Value) -> String {
    v["id"].as_str().unwrap().to_string()
}

/// The ids of a list of records (or of `item`s of search results).
fn ids(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let record = if v.get("item").is_some() {
                &v["item"]
            } else {
                v
            };
            id(record)
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

async fn entity(app: &TestApp, sc: &Value, name: &str, ty: &str, description: &str) -> String {
    let (s, v) = post(
        app,
        "/v1/entities",
        "/v1/entities",
        json!({"scope": sc, "name": name, "type": ty, "description": description}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    id(&v)
}

async fn relate(app: &TestApp, sc: &Value, source: &str, rel: &str, target: &str) -> Value {
    let (s, v) = post(
        app,
        "/v1/relationships",
        "/v1/relationships",
        json!({"scope": sc, "source_id": source, "target_id": target, "relationship_type": rel}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

async fn fact(app: &TestApp, body: Value) -> Value {
    let (s, v) = post(app, "/v1/facts", "/v1/facts", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

async fn forget(app: &TestApp, sc: &Value, reference: &str) -> Value {
    let (s, v) = post(
        app,
        "/v1/forget",
        "/v1/forget",
        json!({"scope": sc, "ref": reference}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "forget {reference}: {v}");
    v
}

async fn related(app: &TestApp, entity: &str, query: &str) -> Vec<(String, u64)> {
    let (s, v) = get(
        app,
        "/v1/entities/{id}/related",
        &format!("/v1/entities/{entity}/related?{Q}{query}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v["related"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["entity"]["name"].as_str().unwrap().to_string(),
                r["depth"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test]
async fn entities_are_idempotent_found_by_name_and_merged() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (s, alice) = post(
        &app,
        "/v1/entities",
        "/v1/entities",
        json!({"scope": sc, "name": "Alice Johnson", "type": "PERSON", "aliases": ["AJ"],
            "description": "Staff engineer on the payments team"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{alice}");
    assert_eq!(
        (&alice["type"], &alice["merged_into"]),
        (&json!("person"), &Value::Null)
    );
    let alice_id = id(&alice);
    // The same name in another case and spacing, the same type: the same entity, enriched.
    let (s, again) = post(
        &app,
        "/v1/entities",
        "/v1/entities",
        json!({"scope": sc, "name": "  alice   JOHNSON ", "type": "person", "aliases": ["Ali", "aj"]}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{again}");
    assert_eq!(id(&again), alice_id);
    assert_eq!(again["name"], "Alice Johnson");
    assert_eq!(again["aliases"], json!(["AJ", "Ali"]));
    assert_eq!(again["description"], "Staff engineer on the payments team");
    // The same name as another type is another entity.
    let place = entity(&app, &sc, "Alice Johnson", "location", "A street in Leeds").await;
    assert_ne!(place, alice_id);

    // By name or alias, exactly but in any case; exact name matches first.
    for name in ["ALICE%20JOHNSON", "alice%20%20johnson", "aj", "Ali"] {
        let (s, v) = get(
            &app,
            "/v1/entities/by-name",
            &format!("/v1/entities/by-name?{Q}&name={name}"),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert!(ids(&v["entities"]).contains(&alice_id), "{name}: {v}");
    }
    let (_, v) = get(
        &app,
        "/v1/entities/by-name",
        &format!("/v1/entities/by-name?{Q}&name=Alice"),
    )
    .await;
    assert_eq!(v["total"], 0, "a name is matched whole: {v}");

    let acme = entity(
        &app,
        &sc,
        "Acme Corp",
        "organization",
        "Payments company in Leeds",
    )
    .await;
    let dup = entity(&app, &sc, "A. Johnson", "person", "Engineer").await;
    relate(&app, &sc, &dup, "works_at", &acme).await;

    // Search by meaning, optionally of one type.
    let (s, v) = get(
        &app,
        "/v1/entities/search",
        &format!("/v1/entities/search?{Q}&q=payments%20engineer&type=person&limit=5"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let found = ids(&v["results"]);
    assert!(found.contains(&alice_id), "{v}");
    assert!(!found.contains(&acme) && !found.contains(&place), "{v}");
    assert!(v["results"][0]["score"].is_number());
    let (_, v) = get(
        &app,
        "/v1/entities/search",
        &format!("/v1/entities/search?{Q}&q=payments%20company"),
    )
    .await;
    assert_eq!(ids(&v["results"])[0], acme, "{v}");

    // Merge the duplicate into Alice.
    let merge = json!({"scope": sc, "source_id": dup, "target_id": alice_id,
        "canonical_name": "Alice M. Johnson"});
    let (s, survivor) = post(
        &app,
        "/v1/entities/merge",
        "/v1/entities/merge",
        merge.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{survivor}");
    assert_eq!(id(&survivor), alice_id);
    assert_eq!(survivor["canonical_name"], "Alice M. Johnson");
    let aliases: BTreeSet<String> = survivor["aliases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert!(
        aliases.is_superset(&set(&["AJ", "Ali", "A. Johnson", "Alice M. Johnson"])),
        "{survivor}"
    );
    // Idempotent.
    let (s, v) = post(&app, "/v1/entities/merge", "/v1/entities/merge", merge).await;
    assert_eq!((s, id(&v)), (StatusCode::OK, alice_id.clone()), "{v}");
    // The old id resolves, naming its survivor.
    let (s, old) = get(
        &app,
        "/v1/entities/{id}",
        &format!("/v1/entities/{dup}?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{old}");
    assert_eq!(
        (id(&old), &old["merged_into"]),
        (dup.clone(), &json!(alice_id))
    );
    // Its relationships moved to the survivor.
    let (s, v) = get(
        &app,
        "/v1/entities/{id}/relationships",
        &format!("/v1/entities/{alice_id}/relationships?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 1, "{v}");
    assert_eq!(
        (
            &v["relationships"][0]["source_id"],
            &v["relationships"][0]["target_id"]
        ),
        (&json!(alice_id), &json!(acme))
    );
    let (_, v) = get(
        &app,
        "/v1/entities/{id}/relationships",
        &format!("/v1/entities/{dup}/relationships?{Q}"),
    )
    .await;
    assert_eq!(v["total"], 0, "{v}");
    // A traversal from the old id starts at the survivor.
    assert_eq!(
        related(&app, &dup, "").await,
        vec![("Acme Corp".to_string(), 1)]
    );
    // The old name finds the survivor; writing it again answers the survivor.
    let (_, v) = get(
        &app,
        "/v1/entities/by-name",
        &format!("/v1/entities/by-name?{Q}&name=a.%20johnson"),
    )
    .await;
    assert_eq!(ids(&v["entities"]), vec![alice_id.clone()], "{v}");
    let (_, v) = post(
        &app,
        "/v1/entities",
        "/v1/entities",
        json!({"scope": sc, "name": "A. Johnson", "type": "person"}),
    )
    .await;
    assert_eq!(id(&v), alice_id);
    // Merged entities are neither listed nor found.
    let (s, v) = get(&app, "/v1/entities", &format!("/v1/entities?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 3, "{v}");
    assert!(!ids(&v["entities"]).contains(&dup));
    let (_, v) = get(
        &app,
        "/v1/entities",
        &format!("/v1/entities?{Q}&type=Person&limit=1"),
    )
    .await;
    assert_eq!(
        (v["total"].as_u64(), ids(&v["entities"])),
        (Some(1), vec![alice_id.clone()])
    );
    let (_, v) = get(
        &app,
        "/v1/entities",
        &format!("/v1/entities?{Q}&limit=2&offset=2"),
    )
    .await;
    assert_eq!(
        (v["total"].as_u64(), v["entities"].as_array().unwrap().len()),
        (Some(3), 1)
    );
    let (_, v) = get(
        &app,
        "/v1/entities/search",
        &format!("/v1/entities/search?{Q}&q=A.%20Johnson%20engineer"),
    )
    .await;
    assert!(!ids(&v["results"]).contains(&dup), "{v}");

    // Merges that cannot be.
    for (source, target, status, code_) in [
        (&dup, &acme, StatusCode::CONFLICT, "conflict"),
        (&acme, &dup, StatusCode::CONFLICT, "conflict"),
        (&acme, &acme, StatusCode::BAD_REQUEST, "invalid_request"),
        (
            &acme,
            &"5f0c6d1e-0000-4000-8000-000000000000".to_string(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
    ] {
        let (s, v) = post(
            &app,
            "/v1/entities/merge",
            "/v1/entities/merge",
            json!({"scope": sc, "source_id": source, "target_id": target}),
        )
        .await;
        assert_eq!((s, code(&v)), (status, Some(code_)), "{v}");
    }

    // Forgetting an entity removes it and its relationships.
    let report = forget(&app, &sc, &format!("ent:{alice_id}")).await;
    assert!(
        report["removed"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("ent:{alice_id}"))),
        "{report}"
    );
    let (s, v) = get(
        &app,
        "/v1/entities/{id}",
        &format!("/v1/entities/{alice_id}?{Q}"),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, Some("not_found")));
    let (_, v) = get(&app, "/v1/relationships", &format!("/v1/relationships?{Q}")).await;
    assert_eq!(v["total"], 0, "{v}");
}

#[tokio::test]
async fn relationships_are_traversed_by_depth_and_type() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let alice = entity(&app, &sc, "Alice", "person", "Designer").await;
    let bob = entity(&app, &sc, "Bob", "person", "Accountant").await;
    let acme = entity(&app, &sc, "Acme", "organization", "Maker of anvils").await;
    let lisbon = entity(&app, &sc, "Lisbon", "location", "Capital of Portugal").await;
    let knows = relate(&app, &sc, &alice, "knows", &bob).await;
    let works = relate(&app, &sc, &bob, "WORKS_AT", &acme).await;
    relate(&app, &sc, &acme, "located in", &lisbon).await;
    // The same edge again is the same relationship; new properties replace the old.
    let again = relate(&app, &sc, &alice, "knows", &bob).await;
    assert_eq!(again, knows);
    let (s, v) = post(
        &app,
        "/v1/relationships",
        "/v1/relationships",
        json!({"scope": sc, "source_id": alice, "target_id": bob, "relationship_type": "knows",
            "properties": {"since": 2019}}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (id(&v), &v["properties"]),
        (id(&knows), &json!({"since": 2019}))
    );

    // Both directions, by depth, nearest first.
    let pair = |n: &str, d: u64| (n.to_string(), d);
    assert_eq!(related(&app, &alice, "").await, vec![pair("Bob", 1)]);
    assert_eq!(
        related(&app, &alice, "&depth=2").await,
        vec![pair("Bob", 1), pair("Acme", 2)]
    );
    assert_eq!(
        related(&app, &alice, "&depth=3").await,
        vec![pair("Bob", 1), pair("Acme", 2), pair("Lisbon", 3)]
    );
    assert_eq!(
        related(&app, &bob, "")
            .await
            .into_iter()
            .collect::<BTreeSet<_>>(),
        [pair("Alice", 1), pair("Acme", 1)].into()
    );
    assert_eq!(
        related(&app, &lisbon, "&depth=2").await,
        vec![pair("Acme", 1), pair("Bob", 2)]
    );
    // Only edges of one type (in canonical form).
    assert_eq!(
        related(&app, &bob, "&relationship_type=works%20at").await,
        vec![pair("Acme", 1)]
    );
    assert_eq!(
        related(&app, &alice, "&depth=3&relationship_type=KNOWS").await,
        vec![pair("Bob", 1)]
    );
    let (s, v) = get(
        &app,
        "/v1/entities/{id}/related",
        &format!("/v1/entities/{alice}/related?{Q}&depth=2"),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["related"][1]["via"]["id"], works["id"], "{v}");
    for depth in [0, 4] {
        let (s, v) = get(
            &app,
            "/v1/entities/{id}/related",
            &format!("/v1/entities/{alice}/related?{Q}&depth={depth}"),
        )
        .await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request"))
        );
    }
    let (s, _) = get(
        &app,
        "/v1/entities/{id}/related",
        &format!("/v1/entities/5f0c6d1e-0000-4000-8000-000000000000/related?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);

    // Listing, all or around one entity, paged.
    let (_, v) = get(&app, "/v1/relationships", &format!("/v1/relationships?{Q}")).await;
    assert_eq!(v["total"], 3, "{v}");
    let (_, v) = get(
        &app,
        "/v1/relationships",
        &format!("/v1/relationships?{Q}&entity_id={bob}&limit=1"),
    )
    .await;
    assert_eq!(
        (
            v["total"].as_u64(),
            v["relationships"].as_array().unwrap().len()
        ),
        (Some(2), 1)
    );
    let (s, v) = get(
        &app,
        "/v1/entities/{id}/relationships",
        &format!("/v1/entities/5f0c6d1e-0000-4000-8000-000000000000/relationships?{Q}"),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, Some("not_found")));

    // Ends must exist; properties must be an object.
    let (s, v) = post(
        &app,
        "/v1/relationships",
        "/v1/relationships",
        json!({"scope": sc, "source_id": alice, "target_id": "5f0c6d1e-0000-4000-8000-000000000000",
            "relationship_type": "knows"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, Some("not_found")));
    let (s, v) = post(
        &app,
        "/v1/relationships",
        "/v1/relationships",
        json!({"scope": sc, "source_id": alice, "target_id": bob, "relationship_type": "knows",
            "properties": [1, 2]}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );

    // Forgetting a relationship cuts the path.
    let report = forget(&app, &sc, &format!("rel:{}", id(&works))).await;
    assert_eq!(report["ref"], json!(format!("rel:{}", id(&works))));
    assert_eq!(
        related(&app, &alice, "&depth=3").await,
        vec![pair("Bob", 1)]
    );
    let (s, v) = post(
        &app,
        "/v1/forget",
        "/v1/forget",
        json!({"scope": sc, "ref": format!("rel:{}", id(&works)), "hard": true}),
    )
    .await;
    assert_eq!(
        s,
        StatusCode::OK,
        "a repeated forget answers its outcome: {v}"
    );
    let (s, v) = post(
        &app,
        "/v1/forget",
        "/v1/forget",
        json!({"scope": sc, "ref": "rel:5f0c6d1e-0000-4000-8000-000000000000"}),
    )
    .await;
    assert_eq!((s, code(&v)), (StatusCode::NOT_FOUND, Some("not_found")));
}

#[tokio::test]
async fn preferences_are_listed_by_category_and_searched() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let add = |category: &str, preference: &str, context: Option<&str>| json!({"scope": sc, "category": category, "preference": preference, "context": context});
    let (s, window) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        add(
            "travel",
            "Window seat on long flights",
            Some("long-haul trips"),
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{window}");
    let (_, aisle) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        add("Travel", "Aisle seat on short hops", None),
    )
    .await;
    let (_, food) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        add("food", "Vegetarian meals, no mushrooms", None),
    )
    .await;
    // The same category and text (any case) is the same preference.
    let (s, again) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        add("TRAVEL", "window seat on long flights", None),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(again, window);

    let (s, v) = get(&app, "/v1/preferences", &format!("/v1/preferences?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 3);
    let (_, v) = get(
        &app,
        "/v1/preferences",
        &format!("/v1/preferences?{Q}&category=travel"),
    )
    .await;
    assert_eq!(ids(&v["preferences"]), vec![id(&window), id(&aisle)], "{v}");
    let (_, v) = get(
        &app,
        "/v1/preferences",
        &format!("/v1/preferences?{Q}&category=TRAVEL&offset=1"),
    )
    .await;
    assert_eq!(
        (v["total"].as_u64(), ids(&v["preferences"])),
        (Some(2), vec![id(&aisle)])
    );

    let (s, v) = get(
        &app,
        "/v1/preferences/search",
        &format!("/v1/preferences/search?{Q}&q=which%20seat%20on%20a%20long%20flight"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(ids(&v["results"])[0], id(&window), "{v}");
    let (_, v) = get(
        &app,
        "/v1/preferences/search",
        &format!("/v1/preferences/search?{Q}&q=seat&category=food&limit=5"),
    )
    .await;
    assert_eq!(ids(&v["results"]), vec![id(&food)], "{v}");

    // Forgotten, it is gone.
    forget(&app, &sc, &format!("pref:{}", id(&food))).await;
    let (_, v) = get(
        &app,
        "/v1/preferences",
        &format!("/v1/preferences?{Q}&category=food"),
    )
    .await;
    assert_eq!(v["total"], 0, "{v}");
}

#[tokio::test]
async fn facts_conflict_supersede_and_keep_their_history() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let triple =
        |s: &str, p: &str, o: &str| json!({"scope": sc, "subject": s, "predicate": p, "object": o});

    // An undeclared predicate: a second object is an open conflict.
    let acme = fact(&app, triple("Alice", "works_at", "Acme Corp")).await;
    assert_eq!(
        (&acme["superseded"], &acme["conflicts_with"]),
        (&json!([]), &json!([]))
    );
    assert_eq!(acme["fact"]["status"], "current");
    let acme_id = id(&acme["fact"]);
    let globex = fact(&app, triple("alice", "Works at", "Globex")).await;
    assert_eq!(globex["conflicts_with"], json!([acme_id]), "{globex}");
    let globex_id = id(&globex["fact"]);
    let (s, v) = get(
        &app,
        "/v1/facts/conflicts",
        &format!("/v1/facts/conflicts?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 1, "{v}");
    let c = &v["conflicts"][0];
    assert_eq!(
        (&c["subject"], &c["predicate"]),
        (&json!("alice"), &json!("works_at"))
    );
    assert_eq!(ids(&c["facts"]), vec![acme_id.clone(), globex_id.clone()]);
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&subject=ALICE&predicate=WORKS%20AT"),
    )
    .await;
    assert_eq!(v["total"], 2, "{v}");
    // The same triple again is the same fact.
    let again = fact(&app, triple("Alice", "works_at", "acme corp")).await;
    assert_eq!(id(&again["fact"]), acme_id);

    // Supersession on request: the old fact becomes history.
    let berlin = id(&fact(&app, triple("Alice", "lives_in", "Berlin")).await["fact"]);
    let mut body = triple("Alice", "lives_in", "Madrid");
    body["supersede"] = json!(true);
    let madrid = fact(&app, body).await;
    assert_eq!(
        (&madrid["superseded"], &madrid["conflicts_with"]),
        (&json!([berlin]), &json!([]))
    );
    let madrid_id = id(&madrid["fact"]);
    assert_eq!(madrid["fact"]["supersedes"], json!([berlin]));
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&predicate=lives_in"),
    )
    .await;
    assert_eq!(ids(&v["facts"]), vec![madrid_id.clone()], "{v}");
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&predicate=lives_in&history=true"),
    )
    .await;
    assert_eq!(
        ids(&v["facts"]),
        vec![berlin.clone(), madrid_id.clone()],
        "{v}"
    );
    let (s, old) = get(&app, "/v1/facts/{id}", &format!("/v1/facts/{berlin}?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{old}");
    assert_eq!(
        (&old["status"], &old["superseded_by"]),
        (&json!("superseded"), &json!(madrid_id))
    );
    assert!(old["valid_until"].is_i64(), "{old}");

    // A single-valued predicate supersedes by itself: the next write replaces both.
    let (s, p) = checked(
        &app,
        "PUT",
        "/v1/predicates",
        "/v1/predicates",
        Some(json!({"scope": sc, "predicate": "Works At", "cardinality": "single"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{p}");
    assert_eq!(
        (&p["name"], &p["cardinality"]),
        (&json!("works_at"), &json!("single"))
    );
    let initech = fact(&app, triple("Alice", "works_at", "Initech")).await;
    let superseded: BTreeSet<String> = initech["superseded"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(superseded, set(&[&acme_id, &globex_id]), "{initech}");
    let (_, v) = get(
        &app,
        "/v1/facts/conflicts",
        &format!("/v1/facts/conflicts?{Q}"),
    )
    .await;
    assert_eq!(v["total"], 0, "the conflict is resolved: {v}");
    // A multi-valued one lets objects stand side by side.
    let (s, _) = checked(
        &app,
        "PUT",
        "/v1/predicates",
        "/v1/predicates",
        Some(json!({"scope": sc, "predicate": "knows", "cardinality": "multi"})),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    fact(&app, triple("Alice", "knows", "Bob")).await;
    let carol = fact(&app, triple("Alice", "knows", "Carol")).await;
    assert_eq!(
        (&carol["superseded"], &carol["conflicts_with"]),
        (&json!([]), &json!([]))
    );
    let (_, v) = get(&app, "/v1/facts", &format!("/v1/facts?{Q}&predicate=knows")).await;
    assert_eq!(v["total"], 2, "{v}");
    let (s, v) = get(&app, "/v1/predicates", &format!("/v1/predicates?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["predicates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        (names, v["total"].as_u64()),
        (vec!["knows", "works_at"], Some(2))
    );

    // Validity windows: what holds at a given time.
    let mut intern = triple("Alice", "title", "Intern");
    intern["valid_from"] = json!(1_000);
    intern["valid_until"] = json!(2_000);
    let intern_id = id(&fact(&app, intern).await["fact"]);
    let (_, v) = get(&app, "/v1/facts", &format!("/v1/facts?{Q}&predicate=title")).await;
    assert_eq!(v["total"], 0, "{v}");
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&predicate=title&at=1500"),
    )
    .await;
    assert_eq!(ids(&v["facts"]), vec![intern_id], "{v}");
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&history=true&limit=2"),
    )
    .await;
    assert_eq!(v["facts"].as_array().unwrap().len(), 2);
    assert_eq!(v["total"], 8, "{v}");

    // Evidence must be stored in the scope; forgetting it invalidates the fact.
    let mut missing = triple("Alice", "lives_in", "Porto");
    missing["evidence_refs"] = json!(["msg:nowhere/7"]);
    let (s, v) = post(&app, "/v1/facts", "/v1/facts", missing.clone()).await;
    assert_eq!(s, StatusCode::UNPROCESSABLE_ENTITY);
    insta::assert_json_snapshot!("fact_evidence_not_found", v);
    let (_, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(
            json!({"scope": sc, "messages": [{"conversation_id": "c1", "role": "user",
            "content": "I moved to Porto last week."}]}),
        ),
        None,
    )
    .await;
    let msg = m["receipts"][0]["ref"].as_str().unwrap().to_string();
    let mut porto = missing;
    porto["evidence_refs"] = json!([msg]);
    porto["supersede"] = json!(true);
    let porto = fact(&app, porto).await;
    assert_eq!(porto["superseded"], json!([madrid_id]), "{porto}");
    assert_eq!(porto["fact"]["evidence_refs"], json!([msg]));
    let porto_id = id(&porto["fact"]);
    let report = forget(&app, &sc, &msg).await;
    assert!(
        report["invalidated"]
            .as_array()
            .unwrap()
            .contains(&json!(format!("fact:{porto_id}"))),
        "{report}"
    );
    let (_, v) = get(&app, "/v1/facts/{id}", &format!("/v1/facts/{porto_id}?{Q}")).await;
    assert_eq!(
        (&v["status"], &v["invalidated_by"]),
        (&json!("invalidated"), &json!([msg]))
    );
    let (_, v) = get(
        &app,
        "/v1/facts",
        &format!("/v1/facts?{Q}&predicate=lives_in"),
    )
    .await;
    assert!(!ids(&v["facts"]).contains(&porto_id), "{v}");

    // Forgetting a fact removes it.
    forget(&app, &sc, &format!("fact:{}", id(&initech["fact"]))).await;
    for fact_id in [id(&initech["fact"]), "not-a-fact".to_string()] {
        let (s, v) = get(&app, "/v1/facts/{id}", &format!("/v1/facts/{fact_id}?{Q}")).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{v}"
        );
    }

    // Bad facts.
    let mut bad_window = triple("Alice", "title", "Lead");
    bad_window["valid_from"] = json!(2_000);
    bad_window["valid_until"] = json!(1_000);
    let mut bad_confidence = triple("Alice", "title", "Lead");
    bad_confidence["confidence"] = json!(1.5);
    let mut bad_evidence = triple("Alice", "title", "Lead");
    bad_evidence["evidence_refs"] = json!(["cand:abc"]);
    for body in [
        bad_window,
        bad_confidence,
        bad_evidence,
        triple("Alice", "--", "Lead"),
        triple(" ", "title", "Lead"),
    ] {
        let (s, v) = post(&app, "/v1/facts", "/v1/facts", body.clone()).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "{body}: {v}"
        );
    }
}

#[tokio::test]
async fn traces_record_steps_tool_calls_and_outcomes() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (s, trace) = post(
        &app,
        "/v1/traces",
        "/v1/traces",
        json!({"scope": sc, "task": "Find why the nightly CI build fails"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{trace}");
    assert_eq!(
        (&trace["session_id"], &trace["completed_at"]),
        (&json!("s1"), &Value::Null)
    );
    let trace_id = id(&trace);

    // Steps are numbered 1, 2, 3 in the order of writing.
    let mut steps = Vec::new();
    for (n, thought) in [
        "Read the build log",
        "Bisect the failing commit",
        "Pin the compiler",
    ]
    .into_iter()
    .enumerate()
    {
        let (s, step) = post(
            &app,
            "/v1/traces/{id}/steps",
            &format!("/v1/traces/{trace_id}/steps"),
            json!({"scope": sc, "thought": thought, "action": "shell"}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{step}");
        assert_eq!(
            (step["step_number"].as_u64(), &step["trace_id"]),
            (Some(n as u64 + 1), &json!(trace_id))
        );
        steps.push(id(&step));
    }
    // Tool calls, numbered within their step.
    let calls = [
        (0, "search_logs", "success", Some(100)),
        (0, "search_logs", "success", Some(300)),
        (0, "search_logs", "error", Some(200)),
        (1, "search_logs", "pending", None),
        (1, "git_bisect", "timeout", Some(50)),
        (2, "git_bisect", "cancelled", None),
    ];
    for (step, tool, status, duration) in calls {
        let (s, v) = post(
            &app,
            "/v1/steps/{id}/tool-calls",
            &format!("/v1/steps/{}/tool-calls", steps[step]),
            json!({"scope": sc, "tool_name": tool, "status": status, "duration_ms": duration,
                "arguments": {"query": "error"}, "result": {"lines": 3}}),
        )
        .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            (&v["status"], &v["step_id"]),
            (&json!(status), &json!(steps[step]))
        );
    }
    let (_, v) = post(
        &app,
        "/v1/steps/{id}/tool-calls",
        &format!("/v1/steps/{}/tool-calls", steps[2]),
        json!({"scope": sc, "tool_name": "notify"}),
    )
    .await;
    assert_eq!(
        (&v["status"], &v["call_number"], &v["arguments"]),
        (&json!("success"), &json!(2), &json!({})),
        "defaults: {v}"
    );

    // The whole trace, in order.
    let (s, view) = get(
        &app,
        "/v1/traces/{id}",
        &format!("/v1/traces/{trace_id}?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["task"], "Find why the nightly CI build fails");
    let numbers: Vec<u64> = view["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, vec![1, 2, 3]);
    let first: Vec<(u64, &str)> = view["steps"][0]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["call_number"].as_u64().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(first, vec![(1, "success"), (2, "success"), (3, "error")]);
    assert_eq!(view["steps"][2]["tool_calls"].as_array().unwrap().len(), 2);

    // Tool statistics.
    let (s, v) = get(&app, "/v1/tools/stats", &format!("/v1/tools/stats?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let names: Vec<&str> = v["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["git_bisect", "notify", "search_logs"]);
    let (_, v) = get(
        &app,
        "/v1/tools/stats",
        &format!("/v1/tools/stats?{Q}&tool=search_logs"),
    )
    .await;
    let t = &v["tools"][0];
    assert_eq!(v["tools"].as_array().unwrap().len(), 1);
    assert_eq!(
        (
            &t["total_calls"],
            &t["successful_calls"],
            &t["failed_calls"],
            &t["other_calls"]
        ),
        (&json!(4), &json!(2), &json!(1), &json!(1)),
        "{t}"
    );
    assert!(
        (t["success_rate"].as_f64().unwrap() - 2.0 / 3.0).abs() < 1e-9,
        "{t}"
    );
    assert_eq!(
        (&t["avg_duration_ms"], &t["p95_duration_ms"]),
        (&json!(200.0), &json!(300))
    );
    let (_, v) = get(
        &app,
        "/v1/tools/stats",
        &format!("/v1/tools/stats?{Q}&tool=git_bisect"),
    )
    .await;
    let t = &v["tools"][0];
    assert_eq!(
        (
            &t["total_calls"],
            &t["failed_calls"],
            &t["other_calls"],
            &t["success_rate"]
        ),
        (&json!(2), &json!(1), &json!(1), &json!(0.0)),
        "{t}"
    );
    assert_eq!(
        (&t["avg_duration_ms"], &t["p95_duration_ms"]),
        (&json!(50.0), &json!(50))
    );

    // Completing: a replay answers the trace, another outcome is a conflict.
    let done =
        json!({"scope": sc, "outcome": "The compiler update broke linking", "success": true});
    let (s, completed) = post(
        &app,
        "/v1/traces/{id}/complete",
        &format!("/v1/traces/{trace_id}/complete"),
        done.clone(),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{completed}");
    assert_eq!(completed["success"], true);
    assert!(completed["completed_at"].is_i64());
    let (s, replay) = post(
        &app,
        "/v1/traces/{id}/complete",
        &format!("/v1/traces/{trace_id}/complete"),
        done,
    )
    .await;
    assert_eq!((s, &replay), (StatusCode::OK, &completed));
    let (s, v) = post(
        &app,
        "/v1/traces/{id}/complete",
        &format!("/v1/traces/{trace_id}/complete"),
        json!({"scope": sc, "outcome": "Gave up", "success": false}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, Some("conflict")),
        "{v}"
    );

    // A trace key makes starting idempotent.
    let keyed = json!({"scope": sc, "task": "Rotate the API keys", "trace_key": "rotate-2024"});
    let (_, k1) = post(&app, "/v1/traces", "/v1/traces", keyed.clone()).await;
    let (s, k2) = post(&app, "/v1/traces", "/v1/traces", keyed).await;
    assert_eq!((s, &k2), (StatusCode::OK, &k1));
    let (s, v) = post(
        &app,
        "/v1/traces",
        "/v1/traces",
        json!({"scope": sc, "task": "Something else", "trace_key": "rotate-2024"}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::CONFLICT, Some("conflict")),
        "{v}"
    );

    // Listing, newest first, by session.
    let mut other_session = sc.clone();
    other_session["session"] = json!("s2");
    let (_, s2) = post(
        &app,
        "/v1/traces",
        "/v1/traces",
        json!({"scope": other_session, "task": "Write the release notes"}),
    )
    .await;
    let (s, v) = get(&app, "/v1/traces", &format!("/v1/traces?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 3, "{v}");
    assert_eq!(ids(&v["traces"])[0], id(&s2));
    let (_, v) = get(&app, "/v1/traces", &format!("/v1/traces?{Q}&session=s1")).await;
    assert_eq!(
        ids(&v["traces"]).into_iter().collect::<BTreeSet<_>>(),
        set(&[&trace_id, &id(&k1)])
    );
    let (_, v) = get(
        &app,
        "/v1/traces",
        &format!("/v1/traces?{Q}&session=s2&limit=1"),
    )
    .await;
    assert_eq!(
        (v["total"].as_u64(), ids(&v["traces"])),
        (Some(1), vec![id(&s2)])
    );

    // Unknown traces and steps.
    let unknown = "5f0c6d1e-0000-4000-8000-000000000000";
    for (template, uri, body) in [
        (
            "/v1/traces/{id}/steps",
            format!("/v1/traces/{unknown}/steps"),
            json!({"scope": sc}),
        ),
        (
            "/v1/traces/{id}/complete",
            format!("/v1/traces/{unknown}/complete"),
            json!({"scope": sc, "success": true}),
        ),
        (
            "/v1/steps/{id}/tool-calls",
            format!("/v1/steps/{unknown}/tool-calls"),
            json!({"scope": sc, "tool_name": "x"}),
        ),
        (
            "/v1/steps/{id}/tool-calls",
            format!("/v1/steps/{trace_id}/tool-calls"),
            json!({"scope": sc, "tool_name": "x"}),
        ),
    ] {
        let (s, v) = post(&app, template, &uri, body).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{uri}: {v}"
        );
    }

    // Forgetting a trace removes its steps and tool calls.
    let report = forget(&app, &sc, &format!("trace:{trace_id}")).await;
    assert_eq!(report["ref"], json!(format!("trace:{trace_id}")));
    let (s, _) = get(
        &app,
        "/v1/traces/{id}",
        &format!("/v1/traces/{trace_id}?{Q}"),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (_, v) = get(&app, "/v1/tools/stats", &format!("/v1/tools/stats?{Q}")).await;
    assert_eq!(v["tools"], json!([]), "{v}");
}

#[tokio::test]
async fn similar_traces_rank_by_task_and_outcome() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let mut traces = Vec::new();
    for (task, success) in [
        ("Plan the company offsite trip to Lisbon", Some(true)),
        (
            "Book flights and a hotel for the Lisbon offsite",
            Some(false),
        ),
        ("Fix the login crash in the mobile app", Some(true)),
        ("Plan a team trip to Lisbon in spring", None),
    ] {
        let (_, t) = post(
            &app,
            "/v1/traces",
            "/v1/traces",
            json!({"scope": sc, "task": task}),
        )
        .await;
        if let Some(ok) = success {
            let (s, v) = post(
                &app,
                "/v1/traces/{id}/complete",
                &format!("/v1/traces/{}/complete", id(&t)),
                json!({"scope": sc, "outcome": "done", "success": ok}),
            )
            .await;
            assert_eq!(s, StatusCode::OK, "{v}");
        }
        traces.push(id(&t));
    }
    let (s, v) = get(
        &app,
        "/v1/traces/similar",
        &format!(
            "/v1/traces/similar?{Q}&task=organize%20the%20team%20offsite%20in%20Lisbon&limit=3"
        ),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let found = ids(&v["results"]);
    assert_eq!(found.len(), 3, "{v}");
    assert!(
        !found.contains(&traces[2]),
        "the mobile app fix is least similar: {v}"
    );
    let (_, v) = get(
        &app,
        "/v1/traces/similar",
        &format!("/v1/traces/similar?{Q}&task=organize%20the%20team%20offsite%20in%20Lisbon&success_only=true"),
    )
    .await;
    let found = ids(&v["results"]);
    assert_eq!(found[0], traces[0], "{v}");
    assert_eq!(
        found.into_iter().collect::<BTreeSet<_>>(),
        set(&[&traces[0], &traces[2]]),
        "only successful traces: {v}"
    );
    assert_eq!(v["results"][0]["item"]["success"], true);
}

#[tokio::test]
async fn messages_are_read_by_id_and_searched_by_meaning() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (s, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(json!({"scope": sc, "messages": [
            {"conversation_id": "c1", "role": "user", "content": "My dentist appointment is on Tuesday at 10am."},
            {"conversation_id": "c1", "role": "assistant", "content": "Noted: the dentist on Tuesday at 10am."},
            {"conversation_id": "c2", "role": "user", "content": "Renew the car insurance before March."},
            {"conversation_id": "c2", "role": "user", "content": "Is my dentist visit still this week?"}
        ]})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{m}");
    let receipt = &m["receipts"][2];
    let (s, v) = get(
        &app,
        "/v1/messages/{ref}",
        &format!("/v1/messages/{}?{Q}", receipt["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(
        (&v["id"], &v["ref"], &v["content"], &v["role"]),
        (
            &receipt["id"],
            &receipt["ref"],
            &json!("Renew the car insurance before March."),
            &json!("user")
        )
    );
    for missing in ["5f0c6d1e-0000-4000-8000-000000000000", "not-an-id"] {
        let (s, v) = get(
            &app,
            "/v1/messages/{ref}",
            &format!("/v1/messages/{missing}?{Q}"),
        )
        .await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{v}"
        );
    }

    let (s, v) = get(
        &app,
        "/v1/messages/search",
        &format!("/v1/messages/search?{Q}&q=when%20is%20the%20dentist%20appointment"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let hits = v["results"].as_array().unwrap();
    assert_eq!(hits.len(), 4, "{v}");
    assert!(
        hits[0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("dentist"),
        "{v}"
    );
    assert_eq!(
        hits[3]["message"]["content"], "Renew the car insurance before March.",
        "{v}"
    );
    let scores: Vec<f64> = hits.iter().map(|h| h["score"].as_f64().unwrap()).collect();
    assert!(
        scores.windows(2).all(|w| w[0] >= w[1]),
        "best first: {scores:?}"
    );
    // One conversation; a floor on the score; a limit.
    let (_, v) = get(
        &app,
        "/v1/messages/search",
        &format!("/v1/messages/search?{Q}&q=dentist&conversation_id=c2"),
    )
    .await;
    let refs: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["message"]["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs[0], "msg:c2/1", "{v}");
    assert!(refs.iter().all(|r| r.starts_with("msg:c2/")), "{v}");
    let floor = (scores[0] + scores[3]) / 2.0;
    let (_, v) = get(
        &app,
        "/v1/messages/search",
        &format!(
            "/v1/messages/search?{Q}&q=when%20is%20the%20dentist%20appointment&min_score={floor}"
        ),
    )
    .await;
    let n = v["results"].as_array().unwrap().len();
    assert!((1..4).contains(&n), "{v}");
    assert!(v["results"]
        .as_array()
        .unwrap()
        .iter()
        .all(|h| h["score"].as_f64().unwrap() >= floor - 1e-6));
    let (_, v) = get(
        &app,
        "/v1/messages/search",
        &format!("/v1/messages/search?{Q}&q=dentist&limit=1"),
    )
    .await;
    assert_eq!(v["results"].as_array().unwrap().len(), 1);
    // The static path is not a message id, and the ref route beside it still deletes.
    let (s, v) = get(
        &app,
        "/v1/messages/search",
        &format!("/v1/messages/search?{Q}"),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{v}"
    );
    let (s, v) = get(
        &app,
        "/v1/messages/search",
        &format!("/v1/messages/search?{Q}&q=%20"),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{v}"
    );
    let (s, v) = checked(
        &app,
        "DELETE",
        "/v1/messages/{ref}",
        &format!("/v1/messages/msg:c2%2F0?{Q}"),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (s, _) = get(
        &app,
        "/v1/messages/{ref}",
        &format!("/v1/messages/{}?{Q}", receipt["id"].as_str().unwrap()),
    )
    .await;
    assert_eq!(s, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn bad_input_answers_the_error_shape() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (s, v) = post(
        &app,
        "/v1/entities",
        "/v1/entities",
        json!({"scope": sc, "name": "Mars", "type": "planet"}),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request"))
    );
    insta::assert_json_snapshot!("unknown_entity_type", v);
    for uri in [
        format!("/v1/entities?{Q}&type=planet"),
        format!("/v1/entities/search?{Q}&q=mars&type=planet"),
    ] {
        let (s, v) = call(&app, "GET", &uri, None, None).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "{uri}"
        );
    }
    // Unknown ids are 404 (a malformed one too: it names nothing stored).
    for (template, id_) in [
        ("/v1/traces/{id}", "5f0c6d1e-0000-4000-8000-000000000000"),
        ("/v1/traces/{id}", "no-such-trace"),
        ("/v1/entities/{id}", "5f0c6d1e-0000-4000-8000-000000000000"),
        ("/v1/facts/{id}", "5f0c6d1e-0000-4000-8000-000000000000"),
    ] {
        let uri = format!("{}?{Q}", template.replace("{id}", id_));
        let (s, v) = get(&app, template, &uri).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::NOT_FOUND, Some("not_found")),
            "{uri}: {v}"
        );
        assert!(v["error"]["message"].as_str().unwrap().contains(id_), "{v}");
    }
    // Malformed JSON, a wrong field, an unknown field, a wrong enum value.
    let req = axum::http::Request::builder()
        .method("POST")
        .uri("/v1/facts")
        .header("content-type", "application/json")
        .body(axum::body::Body::from("{\"scope\": "))
        .unwrap();
    let (s, v) = crate::common::raw(&app, req).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{v}"
    );
    crate::common::assert_documented("POST", "/v1/facts", 400, &v);
    for (template, body) in [
        ("/v1/traces", json!({"scope": sc, "task": 7})),
        (
            "/v1/traces",
            json!({"scope": sc, "task": "x", "owner": "me"}),
        ),
        ("/v1/traces", json!({"scope": sc, "task": "  "})),
        (
            "/v1/preferences",
            json!({"scope": sc, "category": "", "preference": "tea"}),
        ),
        ("/v1/relationships", json!({"scope": sc, "source_id": "a"})),
    ] {
        let (s, v) = post(&app, template, template, body.clone()).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "{body}: {v}"
        );
    }
    let (s, v) = checked(
        &app,
        "PUT",
        "/v1/predicates",
        "/v1/predicates",
        Some(json!({"scope": sc, "predicate": "likes", "cardinality": "some"})),
    )
    .await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::BAD_REQUEST, Some("invalid_request")),
        "{v}"
    );
    // Query strings: a missing or unknown parameter, a wrong type.
    for (template, uri) in [
        ("/v1/entities/search", format!("/v1/entities/search?{Q}")),
        (
            "/v1/entities/by-name",
            format!("/v1/entities/by-name?{Q}&name=x&fuzzy=1"),
        ),
        ("/v1/facts", format!("/v1/facts?{Q}&history=maybe")),
        (
            "/v1/traces/similar",
            format!("/v1/traces/similar?{Q}&task=x&limit=-1"),
        ),
        ("/v1/tools/stats", "/v1/tools/stats?tenant=acme".to_string()),
        (
            "/v1/entities",
            "/v1/entities?tenant=ac%20me&user=alice".to_string(),
        ),
    ] {
        let (s, v) = get(&app, template, &uri).await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::BAD_REQUEST, Some("invalid_request")),
            "{uri}: {v}"
        );
    }
    // A route's other methods.
    let (s, v) = call(&app, "GET", &format!("/v1/entities/merge?{Q}"), None, None).await;
    assert_eq!(
        (s, code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, Some("method_not_allowed")),
        "{v}"
    );
    // Forget refuses unknown knowledge refs with 404 and malformed ones with 400.
    for (reference, status) in [
        (
            "pref:5f0c6d1e-0000-4000-8000-000000000000",
            StatusCode::NOT_FOUND,
        ),
        (
            "trace:5f0c6d1e-0000-4000-8000-000000000000",
            StatusCode::NOT_FOUND,
        ),
        ("ent:", StatusCode::BAD_REQUEST),
    ] {
        let (s, v) = post(
            &app,
            "/v1/forget",
            "/v1/forget",
            json!({"scope": sc, "ref": reference}),
        )
        .await;
        assert_eq!(s, status, "{reference}: {v}");
    }
}

#[tokio::test]
async fn knowledge_stays_in_its_tenant_and_user() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let alice = entity(&app, &sc, "Alice", "person", "Designer").await;
    let bob = entity(&app, &sc, "Bob", "person", "Accountant").await;
    let rel = relate(&app, &sc, &alice, "knows", &bob).await;
    let (_, pref) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        json!({"scope": sc, "category": "food", "preference": "Spicy ramen"}),
    )
    .await;
    fact(
        &app,
        json!({"scope": sc, "subject": "Alice", "predicate": "works_at", "object": "Acme"}),
    )
    .await;
    let f = fact(
        &app,
        json!({"scope": sc, "subject": "Alice", "predicate": "works_at", "object": "Globex"}),
    )
    .await;
    let (_, _) = checked(
        &app,
        "PUT",
        "/v1/predicates",
        "/v1/predicates",
        Some(json!({"scope": sc, "predicate": "knows", "cardinality": "multi"})),
    )
    .await;
    let (_, trace) = post(
        &app,
        "/v1/traces",
        "/v1/traces",
        json!({"scope": sc, "task": "Plan the Lisbon offsite"}),
    )
    .await;
    let (_, step) = post(
        &app,
        "/v1/traces/{id}/steps",
        &format!("/v1/traces/{}/steps", id(&trace)),
        json!({"scope": sc, "thought": "Look at venues"}),
    )
    .await;
    post(
        &app,
        "/v1/steps/{id}/tool-calls",
        &format!("/v1/steps/{}/tool-calls", id(&step)),
        json!({"scope": sc, "tool_name": "venue_search"}),
    )
    .await;
    let (_, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(
            json!({"scope": sc, "messages": [{"conversation_id": "c1", "role": "user",
            "content": "Alice works at Globex now."}]}),
        ),
        None,
    )
    .await;
    let message = m["receipts"][0]["id"].as_str().unwrap().to_string();

    for other in [OTHER_TENANT, OTHER_USER] {
        for (template, path) in [
            ("/v1/entities/{id}", format!("/v1/entities/{alice}")),
            (
                "/v1/entities/{id}/related",
                format!("/v1/entities/{alice}/related"),
            ),
            (
                "/v1/entities/{id}/relationships",
                format!("/v1/entities/{alice}/relationships"),
            ),
            ("/v1/facts/{id}", format!("/v1/facts/{}", id(&f["fact"]))),
            ("/v1/traces/{id}", format!("/v1/traces/{}", id(&trace))),
            ("/v1/messages/{ref}", format!("/v1/messages/{message}")),
        ] {
            let (s, v) = get(&app, template, &format!("{path}?{other}")).await;
            assert_eq!(
                (s, code(&v)),
                (StatusCode::NOT_FOUND, Some("not_found")),
                "{path}?{other}: {v}"
            );
        }
        for (template, query, list) in [
            ("/v1/entities", "", "entities"),
            ("/v1/entities/by-name", "&name=alice", "entities"),
            ("/v1/entities/search", "&q=Alice", "results"),
            ("/v1/relationships", "", "relationships"),
            ("/v1/preferences", "", "preferences"),
            ("/v1/preferences/search", "&q=ramen", "results"),
            ("/v1/facts", "&history=true", "facts"),
            ("/v1/facts/conflicts", "", "conflicts"),
            ("/v1/predicates", "", "predicates"),
            ("/v1/traces", "", "traces"),
            ("/v1/traces/similar", "&task=Lisbon%20offsite", "results"),
            ("/v1/tools/stats", "", "tools"),
            ("/v1/messages/search", "&q=Globex", "results"),
        ] {
            let uri = format!("{template}?{other}{query}");
            let (s, v) = get(&app, template, &uri).await;
            assert_eq!(s, StatusCode::OK, "{uri}: {v}");
            assert_eq!(v[list], json!([]), "{uri}: {v}");
        }
        // Writes in another scope cannot reach these records.
        let (tenant, user) = if other == OTHER_TENANT {
            ("globex", "alice")
        } else {
            ("acme", "bob")
        };
        let osc = json!({"tenant": tenant, "user": user, "namespace": "kb", "agent": "bot", "session": "s1"});
        for (template, uri, body) in [
            (
                "/v1/relationships",
                "/v1/relationships".to_string(),
                json!({"scope": osc, "source_id": alice, "target_id": bob, "relationship_type": "knows"}),
            ),
            (
                "/v1/entities/merge",
                "/v1/entities/merge".to_string(),
                json!({"scope": osc, "source_id": bob, "target_id": alice}),
            ),
            (
                "/v1/traces/{id}/steps",
                format!("/v1/traces/{}/steps", id(&trace)),
                json!({"scope": osc, "thought": "sneak"}),
            ),
            (
                "/v1/steps/{id}/tool-calls",
                format!("/v1/steps/{}/tool-calls", id(&step)),
                json!({"scope": osc, "tool_name": "sneak"}),
            ),
            (
                "/v1/traces/{id}/complete",
                format!("/v1/traces/{}/complete", id(&trace)),
                json!({"scope": osc, "success": false}),
            ),
            (
                "/v1/forget",
                "/v1/forget".to_string(),
                json!({"scope": osc, "ref": format!("pref:{}", id(&pref))}),
            ),
            (
                "/v1/forget",
                "/v1/forget".to_string(),
                json!({"scope": osc, "ref": format!("rel:{}", id(&rel))}),
            ),
        ] {
            let (s, v) = post(&app, template, &uri, body).await;
            assert_eq!(
                (s, code(&v)),
                (StatusCode::NOT_FOUND, Some("not_found")),
                "{uri}: {v}"
            );
        }
        // Evidence from another scope is not evidence.
        let (s, v) = post(
            &app,
            "/v1/facts",
            "/v1/facts",
            json!({"scope": osc, "subject": "Alice", "predicate": "works_at", "object": "Globex",
                "evidence_refs": [m["receipts"][0]["ref"]]}),
        )
        .await;
        assert_eq!(
            (s, code(&v)),
            (StatusCode::UNPROCESSABLE_ENTITY, Some("evidence_not_found")),
            "{v}"
        );
    }
    // The owner still sees everything.
    let (_, v) = get(
        &app,
        "/v1/facts/conflicts",
        &format!("/v1/facts/conflicts?{Q}"),
    )
    .await;
    assert_eq!(v["total"], 1, "{v}");
    let (_, v) = get(&app, "/v1/relationships", &format!("/v1/relationships?{Q}")).await;
    assert_eq!(v["total"], 1, "{v}");
    let (_, v) = get(
        &app,
        "/v1/traces/{id}",
        &format!("/v1/traces/{}?{Q}", id(&trace)),
    )
    .await;
    assert_eq!(v["steps"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["completed_at"], Value::Null, "{v}");
}

#[tokio::test]
async fn recall_cites_knowledge_and_shows_fact_conflicts() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (_, pref) = post(
        &app,
        "/v1/preferences",
        "/v1/preferences",
        json!({"scope": sc, "category": "travel", "preference": "Alice prefers a window seat on flights",
            "context": "long-haul trips"}),
    )
    .await;
    let ent = entity(
        &app,
        &sc,
        "Marguerite Okafor",
        "person",
        "Head of the Lagos design studio, mentor of the interns",
    )
    .await;
    let acme = id(&fact(
        &app,
        json!({"scope": sc, "subject": "Alice", "predicate": "works_at", "object": "Acme Corp"}),
    )
    .await["fact"]);
    let globex = id(&fact(
        &app,
        json!({"scope": sc, "subject": "Alice", "predicate": "works_at", "object": "Globex"}),
    )
    .await["fact"]);
    let (_, trace) = post(
        &app,
        "/v1/traces",
        "/v1/traces",
        json!({"scope": sc, "task": "Plan the company offsite trip to Lisbon"}),
    )
    .await;
    let (s, _) = post(
        &app,
        "/v1/traces/{id}/complete",
        &format!("/v1/traces/{}/complete", id(&trace)),
        json!({"scope": sc, "outcome": "Booked the venue in Alfama", "success": true}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    let recall = |query: &str| json!({"scope": sc, "query": query});
    let (s, pack) = post(
        &app,
        "/v1/recall",
        "/v1/recall",
        recall("Where does Alice work?"),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{pack}");
    let cited = refs_of(&pack);
    assert!(cited.contains(&format!("fact:{acme}")), "{cited:?}");
    assert!(cited.contains(&format!("fact:{globex}")), "{cited:?}");
    let conflict = pack["conflicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["topic"] == "alice works at _")
        .unwrap_or_else(|| panic!("{}", pack["conflicts"]));
    let values: BTreeSet<String> = conflict["sides"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["value"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(values, set(&["Acme Corp", "Globex"]));
    assert_eq!(
        pack["coverage"], "partial",
        "a conflict is never full coverage"
    );

    for (query, wanted) in [
        (
            "Which seat does Alice like on flights?",
            format!("pref:{}", id(&pref)),
        ),
        ("Who is Marguerite Okafor?", format!("ent:{ent}")),
        (
            "How did we plan the offsite in Lisbon?",
            format!("trace:{}", id(&trace)),
        ),
    ] {
        let (s, pack) = post(&app, "/v1/recall", "/v1/recall", recall(query)).await;
        assert_eq!(s, StatusCode::OK, "{pack}");
        assert!(
            refs_of(&pack).contains(&wanted),
            "{query}: {}",
            pack["context_markdown"]
        );
    }
}

/// `POST /v1/entities/suggest`: names mentioned in several messages come back as pending
/// entity candidates (documented shape), and only approval makes them known.
#[tokio::test]
async fn suggested_entities_go_through_review() {
    let app = test_app(Auth::default(), 1 << 20);
    let sc = scope("acme");
    let (s, m) = call(
        &app,
        "POST",
        "/v1/messages",
        Some(json!({"scope": sc, "messages": [
            {"conversation_id": "c1", "role": "user", "content": "Ask Noor Haddad about the Lisbon offsite."},
            {"conversation_id": "c1", "role": "assistant", "content": "I will ask Noor Haddad today."},
            {"conversation_id": "c1", "role": "user", "content": "Thanks."}
        ]})),
        None,
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{m}");
    let (s, v) = post(
        &app,
        "/v1/entities/suggest",
        "/v1/entities/suggest",
        json!({"scope": sc}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let suggestions = v["suggestions"].as_array().unwrap();
    assert_eq!(suggestions.len(), 1, "{v}");
    assert_eq!(suggestions[0]["name"], "Noor Haddad");
    assert_eq!(suggestions[0]["candidate"]["status"], "pending");
    assert_eq!(suggestions[0]["candidate"]["knowledge"]["kind"], "entity");
    let (s, v) = get(&app, "/v1/entities", &format!("/v1/entities?{Q}")).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["total"], 0, "nothing known before approval: {v}");
}
