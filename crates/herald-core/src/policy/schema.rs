//! Catalog schemas (docs/api.md): each event type's payload schema, JSON Schema draft 2020-12,
//! compiled once at start. `check-config` reports a schema that is not a valid schema, or a
//! sample that does not satisfy its schema; with `catalog.validate = true` ingest refuses a
//! payload that violates its type's schema.
//!
//! Schemas are compiled offline: a `$ref` can reach only the schema itself (no network, no
//! files), so a config can never make herald fetch anything.

use std::collections::HashMap;

use serde_json::Value;

/// The compiled schemas of a catalog, by event type.
#[derive(Default)]
pub struct Catalog {
    schemas: boon::Schemas,
    by_type: HashMap<String, boon::SchemaIndex>,
}

/// Why a payload does not satisfy its schema: the rule that failed and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The JSON pointer of the offending value within the payload (`""` for the payload itself).
    pub pointer: String,
    pub message: String,
}

/// Compiles one schema; the error says why it is not a valid schema.
fn compile_one(
    compiler: &mut boon::Compiler,
    schemas: &mut boon::Schemas,
    ty: &str,
    schema: Value,
) -> Result<boon::SchemaIndex, String> {
    let url = format!("urn:herald:catalog:{}", url_safe(ty));
    compiler
        .add_resource(&url, schema)
        .map_err(|e| one_line(&e.to_string()))?;
    compiler
        .compile(&url, schemas)
        .map_err(|e| one_line(&format!("{e:#}")))
}

fn url_safe(ty: &str) -> String {
    ty.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'.' | b'-' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl Catalog {
    /// Compiles `(type, schema)` pairs; every failure as `(type, why)`.
    pub fn compile<'a>(
        types: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> Result<Catalog, Vec<(String, String)>> {
        let (catalog, errors) = Catalog::compile_what_can(types);
        if errors.is_empty() {
            Ok(catalog)
        } else {
            Err(errors)
        }
    }

    /// Compiles what it can: the catalog of the good schemas, and every failure.
    pub fn compile_what_can<'a>(
        types: impl IntoIterator<Item = (&'a str, Value)>,
    ) -> (Catalog, Vec<(String, String)>) {
        let mut compiler = boon::Compiler::new();
        compiler.set_default_draft(boon::Draft::V2020_12);
        let mut catalog = Catalog::default();
        let mut errors = Vec::new();
        for (ty, schema) in types {
            match compile_one(&mut compiler, &mut catalog.schemas, ty, schema) {
                Ok(idx) => {
                    catalog.by_type.insert(ty.to_string(), idx);
                }
                Err(why) => errors.push((ty.to_string(), why)),
            }
        }
        (catalog, errors)
    }

    /// Whether the type has a schema.
    pub fn has(&self, ty: &str) -> bool {
        self.by_type.contains_key(ty)
    }

    /// Checks a payload against its type's schema (a type without one accepts anything).
    pub fn validate(&self, ty: &str, payload: &Value) -> Result<(), Violation> {
        let Some(idx) = self.by_type.get(ty) else {
            return Ok(());
        };
        self.schemas
            .validate(payload, *idx)
            .map_err(|e| violation(&e))
    }
}

/// The first leaf of the error tree: the one rule that failed, where it failed.
fn violation(e: &boon::ValidationError<'_, '_>) -> Violation {
    let mut leaf = e;
    while let Some(first) = leaf.causes.first() {
        leaf = first;
    }
    // The keyword that failed: boon's error kinds are named after them (`MinLength` is
    // `minLength`).
    let kind = format!("{:?}", leaf.kind);
    let name: String = kind
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    let mut chars = name.chars();
    let keyword = chars
        .next()
        .map(|c| c.to_ascii_lowercase().to_string() + chars.as_str())
        .filter(|k| !k.is_empty());
    let rule = one_line(&leaf.kind.to_string());
    Violation {
        pointer: leaf.instance_location.to_string(),
        message: match keyword {
            Some(k) => format!("{k}: {rule}"),
            None => rule,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn order_schema() -> Value {
        json!({
            "type": "object",
            "required": ["order_id", "items"],
            "properties": {
                "order_id": {"type": "string"},
                "items": {"type": "array", "items": {
                    "type": "object", "properties": {"price": {"type": "number", "minimum": 0}}}},
            },
        })
    }

    #[test]
    fn violations_name_the_rule_and_the_pointer() {
        let c = Catalog::compile([("order.created", order_schema())]).unwrap();
        assert!(c.has("order.created"));
        let good = json!({"order_id": "o-1", "items": [{"price": 3}]});
        assert_eq!(c.validate("order.created", &good), Ok(()));
        let bad = json!({"order_id": "o-1", "items": [{"price": 3}, {"price": -1}]});
        let v = c.validate("order.created", &bad).unwrap_err();
        assert_eq!(v.pointer, "/items/1/price");
        assert!(v.message.contains("minimum"), "{}", v.message);
        let missing = json!({"items": []});
        let v = c.validate("order.created", &missing).unwrap_err();
        assert_eq!(v.pointer, "");
        assert!(v.message.contains("order_id"), "{}", v.message);
        // A type without a schema takes anything.
        assert_eq!(c.validate("other", &json!([1])), Ok(()));
    }

    #[test]
    fn an_invalid_schema_is_refused_with_its_type() {
        let errors = Catalog::compile([
            ("good", json!({"type": "object"})),
            ("bad", json!({"type": "objekt"})),
            ("remote", json!({"$ref": "https://example.com/schema.json"})),
        ])
        .err()
        .unwrap();
        let types: Vec<&str> = errors.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(types, ["bad", "remote"]);
    }
}
