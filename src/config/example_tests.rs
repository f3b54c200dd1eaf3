//! `config.example.toml` names every key the config takes, and only those: the keys come from
//! serde's own field lists (each struct's deserializer is handed its field names), so a new key
//! fails this test until the example documents it (set, or commented out with its default or
//! an example value).

use std::cell::RefCell;
use std::collections::BTreeSet;

use serde::de::{self, DeserializeSeed, IntoDeserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::Config;

#[derive(Debug)]
struct Stop(String);

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: std::fmt::Display>(m: T) -> Self {
        Stop(m.to_string())
    }
}

/// A deserializer that records, at each struct it is asked for, the struct's field names under
/// its path, and hands each field a walker one level down; a map gets one entry named `*`, and
/// every other value is the simplest its type takes (`"1s"` for a string: durations parse it).
struct Walk<'a> {
    path: String,
    keys: &'a RefCell<BTreeSet<String>>,
}

impl<'a> Walk<'a> {
    fn at(&self, name: &str) -> Walk<'a> {
        Walk {
            path: match self.path.as_str() {
                "" => name.to_string(),
                p => format!("{p}.{name}"),
            },
            keys: self.keys,
        }
    }
}

/// A struct's fields (or a map's one `*` entry), each with its walker.
struct Fields<'a> {
    names: &'static [&'static str],
    next: usize,
    walk: Walk<'a>,
}

impl<'de> MapAccess<'de> for Fields<'_> {
    type Error = Stop;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Stop> {
        match self.names.get(self.next) {
            Some(name) => seed.deserialize(name.into_deserializer()).map(Some),
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, Stop> {
        let name = self.names[self.next];
        self.next += 1;
        seed.deserialize(self.walk.at(name))
    }
}

/// An empty sequence.
struct Empty;

impl<'de> SeqAccess<'de> for Empty {
    type Error = Stop;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        _: T,
    ) -> Result<Option<T::Value>, Stop> {
        Ok(None)
    }
}

/// An enum's first variant, as a unit.
struct First(&'static str);

impl<'de> de::EnumAccess<'de> for First {
    type Error = Stop;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), Stop> {
        Ok((seed.deserialize(self.0.into_deserializer())?, self))
    }
}

impl<'de> de::VariantAccess<'de> for First {
    type Error = Stop;

    fn unit_variant(self) -> Result<(), Stop> {
        Ok(())
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, _: T) -> Result<T::Value, Stop> {
        Err(Stop(format!("variant {} holds a value", self.0)))
    }

    fn tuple_variant<V: Visitor<'de>>(self, _: usize, v: V) -> Result<V::Value, Stop> {
        v.visit_seq(Empty)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        Err(Stop(format!("variant {} holds fields", self.0)))
    }
}

impl<'de> de::Deserializer<'de> for Walk<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_str("1s")
    }

    fn deserialize_bool<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_bool(false)
    }

    fn deserialize_i64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_u64(1)
    }

    fn deserialize_u64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_u64(1)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_f64(1.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_some(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        v.visit_seq(Empty)
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.keys.borrow_mut().insert(self.at("*").path);
        v.visit_map(Fields {
            names: &["*"],
            next: 0,
            walk: self,
        })
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Stop> {
        for f in fields {
            self.keys.borrow_mut().insert(self.at(f).path);
        }
        v.visit_map(Fields {
            names: fields,
            next: 0,
            walk: self,
        })
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, Stop> {
        v.visit_enum(First(variants[0]))
    }

    serde::forward_to_deserialize_any! {
        char str string bytes byte_buf unit unit_struct newtype_struct tuple tuple_struct
        identifier ignored_any
    }

    fn deserialize_i8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_i64(v)
    }
    fn deserialize_i16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_i64(v)
    }
    fn deserialize_i32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_i64(v)
    }
    fn deserialize_u8<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_u64(v)
    }
    fn deserialize_u16<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_u64(v)
    }
    fn deserialize_u32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_u64(v)
    }
    fn deserialize_f32<V: Visitor<'de>>(self, v: V) -> Result<V::Value, Stop> {
        self.deserialize_f64(v)
    }
}

/// Every key the config takes, as dotted paths (`*`: any name of a table of names).
fn config_keys() -> Vec<Vec<String>> {
    let keys = RefCell::new(BTreeSet::new());
    Config::deserialize(Walk {
        path: String::new(),
        keys: &keys,
    })
    .expect("the config's structs take the walk");
    keys.into_inner()
        .into_iter()
        .map(|k| k.split('.').map(str::to_string).collect())
        .collect()
}

/// Every key `config.example.toml` names, set or commented out (a comment line that is a
/// table header or a `key = value` line on its own), with the table it is in.
fn example_keys() -> Vec<Vec<String>> {
    fn paths(prefix: &[String], t: &toml::Table, out: &mut Vec<Vec<String>>) {
        for (k, v) in t {
            let mut p = prefix.to_vec();
            p.push(k.clone());
            out.push(p.clone());
            if let toml::Value::Table(inner) = v {
                paths(&p, inner, out);
            }
        }
    }
    let mut table: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in include_str!("../../config.example.toml").lines() {
        let line = line.trim();
        let body = line.strip_prefix('#').map_or(line, str::trim);
        let Ok(parsed) = toml::from_str::<toml::Table>(body) else {
            continue;
        };
        if body.starts_with('[') {
            // A header parses as nested tables, one key each.
            table.clear();
            let mut t = &parsed;
            while let Some((k, toml::Value::Table(inner))) = t.iter().next() {
                table.push(k.clone());
                t = inner;
            }
            out.push(table.clone());
        } else {
            paths(&table, &parsed, &mut out);
        }
    }
    out
}

fn matches(pattern: &[String], path: &[String]) -> bool {
    pattern.len() == path.len() && pattern.iter().zip(path).all(|(p, s)| p == "*" || p == s)
}

#[test]
fn the_example_names_every_config_key_and_no_other() {
    let keys = config_keys();
    let example = example_keys();
    let missing: Vec<String> = keys
        .iter()
        .filter(|k| {
            !example
                .iter()
                .any(|e| e.len() >= k.len() && matches(k, &e[..k.len()]))
        })
        .map(|k| k.join("."))
        .collect();
    assert!(
        missing.is_empty(),
        "config.example.toml does not name these keys: {missing:?}"
    );
    // A key below a leaf (a sample's own fields) is the value's, not the config's.
    let leaf = |k: &Vec<String>| {
        !keys
            .iter()
            .any(|o| o.len() > k.len() && o[..k.len()] == k[..])
    };
    let unknown: Vec<String> = example
        .iter()
        .filter(|e| {
            !keys.iter().any(|k| {
                matches(k, e) || (k.len() < e.len() && leaf(k) && matches(k, &e[..k.len()]))
            })
        })
        .map(|e| e.join("."))
        .collect();
    assert!(
        unknown.is_empty(),
        "config.example.toml names keys the config does not take: {unknown:?}"
    );
    assert!(keys.len() > 60, "the walk found {} keys", keys.len());
}
