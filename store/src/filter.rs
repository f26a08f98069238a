//! Cairn's filter language over payload fields, translated to Qdrant filters by each adapter.

use cairn_models::Partition;
use serde::{Deserialize, Serialize};

/// A payload value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Value {
    Str(String),
    Int(i64),
    Bool(bool),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<i64> for Value {
    fn from(v: i64) -> Self {
        Value::Int(v)
    }
}

/// One condition on a payload field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Cond {
    /// `field == value`
    Eq(String, Value),
    /// `field != value` (also true when the field is absent)
    NotEq(String, Value),
    /// `field` is one of the strings.
    AnyOf(String, Vec<String>),
    /// `gte <= field <= lte` on a numeric field.
    Range {
        field: String,
        gte: Option<f64>,
        lte: Option<f64>,
    },
}

/// A conjunction of conditions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Filter {
    pub must: Vec<Cond>,
}

impl Filter {
    pub fn new() -> Self {
        Filter::default()
    }

    pub fn eq(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.must.push(Cond::Eq(field.to_string(), value.into()));
        self
    }

    pub fn not_eq(mut self, field: &str, value: impl Into<Value>) -> Self {
        self.must.push(Cond::NotEq(field.to_string(), value.into()));
        self
    }

    pub fn any_of(mut self, field: &str, values: Vec<String>) -> Self {
        self.must.push(Cond::AnyOf(field.to_string(), values));
        self
    }

    pub fn range(mut self, field: &str, gte: Option<f64>, lte: Option<f64>) -> Self {
        self.must.push(Cond::Range {
            field: field.to_string(),
            gte,
            lte,
        });
        self
    }

    /// This filter ANDed with the partition's tenant, user and namespace.
    pub fn scoped(&self, partition: &Partition) -> Filter {
        let mut f = Filter::new()
            .eq("tenant", partition.tenant.as_str())
            .eq("user", partition.user.as_str())
            .eq("namespace", partition.namespace.as_str());
        f.must.extend(self.must.iter().cloned());
        f
    }
}
