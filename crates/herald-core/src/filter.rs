//! Payload filters (docs/api.md, "Payload filters"): an endpoint's JSON filter, checked once when
//! it is set and compiled into a small tree, then matched at every fan-out against
//! `{"type": TYPE, "payload": PAYLOAD}`. The limits apply when a filter is set
//! ([`Filter::parse`]), not when a stored one is loaded ([`Filter::load`]).
//!
//! The grammar: a filter is a JSON object. At the top its keys are `type`, `payload`, `$and`,
//! `$or` and `$not`. Below, a key that does not start with `$` descends into an object (keys are
//! literal: a `.` is just a character); a value that is not an object means "equal"; an object
//! holds operators and keys, all of which must hold. An array is compared whole: a key never
//! descends into one. A missing path makes every test false except `$exists: false`, `$neq` and
//! `$nin`, which are true; `$not` is plain negation of the filter it holds.
//!
//! Matching never allocates; [`Filter::explain`] (the filter-test route) says which test failed.

use std::cmp::Ordering as Cmp;
use std::fmt::Write as _;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Number, Value};

/// The longest filter, as compact JSON text: filters are kept in memory for every fan-out.
pub const MAX_BYTES: usize = 4096;
/// The deepest nesting of objects and arrays in a filter (the outer object is level 1).
pub const MAX_DEPTH: usize = 8;
/// The most operators in a filter: each `$` operator and each literal equality counts one.
pub const MAX_OPERATORS: usize = 64;

/// A checked filter: the JSON the endpoint was given (what `GET` shows and the stores keep) and
/// the tree it compiles to.
#[derive(Debug, Clone)]
pub struct Filter {
    source: Value,
    root: Node,
}

/// Why a filter was refused: `field` names the path in the filter (`filter.payload.amount.$gte`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FilterError {
    pub field: String,
    pub message: String,
}

/// What a filter is matched against: the event's type and its payload.
#[derive(Debug)]
pub struct Subject {
    event_type: Value,
    payload: Value,
}

impl Subject {
    pub fn new(event_type: &str, payload: Value) -> Subject {
        Subject {
            event_type: Value::String(event_type.to_string()),
            payload,
        }
    }
}

#[derive(Debug, Clone)]
enum Node {
    All(Vec<Node>),
    Any(Vec<Node>),
    Not(Box<Node>),
    Test(Path, Op),
}

/// A path below the top: which of the two top-level values, then object keys.
#[derive(Debug, Clone)]
struct Path {
    payload: bool,
    keys: Vec<String>,
}

#[derive(Debug, Clone)]
enum Op {
    Eq(Value),
    Neq(Value),
    Gt(Value),
    Gte(Value),
    Lt(Value),
    Lte(Value),
    In(Vec<Value>),
    Nin(Vec<Value>),
    Exists(bool),
    StartsWith(String),
    EndsWith(String),
}

impl Filter {
    /// Checks and compiles `value` (the `filter` field of an endpoint). `null` is no filter.
    pub fn parse(value: &Value) -> Result<Option<Filter>, FilterError> {
        if value.is_null() {
            return Ok(None);
        }
        let at = "filter".to_string();
        if !value.is_object() {
            return Err(refuse(&at, "must be an object (or null for no filter)"));
        }
        let len = serde_json::to_string(value).map_or(usize::MAX, |s| s.len());
        if len > MAX_BYTES {
            return Err(refuse(
                &at,
                format!("is {len} bytes of JSON; a filter holds at most {MAX_BYTES}"),
            ));
        }
        if depth(value) > MAX_DEPTH {
            return Err(refuse(
                &at,
                format!("nests deeper than {MAX_DEPTH} levels of objects and arrays"),
            ));
        }
        let mut compiler = Compiler { operators: 0 };
        let root = compiler.top(value, &at)?;
        if compiler.operators > MAX_OPERATORS {
            return Err(refuse(
                &at,
                format!(
                    "holds {} operators; a filter holds at most {MAX_OPERATORS}",
                    compiler.operators
                ),
            ));
        }
        Ok(Some(Filter {
            source: value.clone(),
            root,
        }))
    }

    /// Compiles a filter a store kept (or a backup holds): its grammar is checked, not the
    /// limits, which apply when a filter is set. A later release may tighten them; a filter
    /// stored under the earlier ones must still load, and match as it did.
    pub fn load(value: &Value) -> Result<Filter, FilterError> {
        let root = Compiler { operators: 0 }.top(value, "filter")?;
        Ok(Filter {
            source: value.clone(),
            root,
        })
    }

    /// The filter as it was given.
    pub fn source(&self) -> &Value {
        &self.source
    }

    pub fn matches(&self, subject: &Subject) -> bool {
        self.root.matches(subject)
    }

    /// `None` if the filter matches; else the first reason it does not, in words
    /// (`payload.amount: 50 is not >= 100`).
    pub fn explain(&self, subject: &Subject) -> Option<String> {
        self.root.explain(subject)
    }
}

impl PartialEq for Filter {
    fn eq(&self, other: &Filter) -> bool {
        self.source == other.source
    }
}

impl Serialize for Filter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.source.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Filter, D::Error> {
        let value = Value::deserialize(d)?;
        if value.is_null() {
            return Err(serde::de::Error::custom("a stored filter is null"));
        }
        Filter::load(&value).map_err(serde::de::Error::custom)
    }
}

fn refuse(field: &str, message: impl Into<String>) -> FilterError {
    FilterError {
        field: field.to_string(),
        message: format!("{field} {}", message.into()),
    }
}

/// Nesting of objects and arrays; a scalar is level 0.
fn depth(v: &Value) -> usize {
    match v {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

struct Compiler {
    operators: usize,
}

impl Compiler {
    /// The top level: `type`, `payload` and the three logical operators.
    fn top(&mut self, v: &Value, at: &str) -> Result<Node, FilterError> {
        let Value::Object(map) = v else {
            return Err(refuse(at, "must be an object"));
        };
        let mut all = Vec::with_capacity(map.len());
        for (key, value) in map {
            let here = format!("{at}.{key}");
            let node = match key.as_str() {
                "type" | "payload" => {
                    let path = Path {
                        payload: key == "payload",
                        keys: Vec::new(),
                    };
                    self.at_path(value, &path, &here)?
                }
                "$and" | "$or" => {
                    let items = self.list(value, &here, |c, item, at| c.top(item, at))?;
                    self.logical(key, items)
                }
                "$not" => {
                    self.operators += 1;
                    Node::Not(Box::new(self.top(value, &here)?))
                }
                k if k.starts_with('$') => {
                    return Err(refuse(
                        &here,
                        "is not an operator of the top level; it takes type, payload, $and, $or and $not",
                    ))
                }
                _ => {
                    return Err(refuse(
                        &here,
                        "is not a key of the top level; a filter matches {\"type\", \"payload\"}: put payload fields under payload",
                    ))
                }
            };
            all.push(node);
        }
        Ok(one_or_all(all))
    }

    /// A filter at a path: a literal (equal) or an object of operators and keys.
    fn at_path(&mut self, v: &Value, path: &Path, at: &str) -> Result<Node, FilterError> {
        let Value::Object(map) = v else {
            self.operators += 1;
            return Ok(Node::Test(path.clone(), Op::Eq(v.clone())));
        };
        if map.is_empty() {
            return Err(refuse(
                at,
                "is an empty object, which tests nothing: give a value or an operator",
            ));
        }
        let mut all = Vec::with_capacity(map.len());
        for (key, value) in map {
            let here = format!("{at}.{key}");
            let node = match key.as_str() {
                "$and" | "$or" => {
                    let items = self.list(value, &here, |c, item, at| c.at_path(item, path, at))?;
                    self.logical(key, items)
                }
                "$not" => {
                    self.operators += 1;
                    Node::Not(Box::new(self.at_path(value, path, &here)?))
                }
                k if k.starts_with('$') => {
                    self.operators += 1;
                    Node::Test(path.clone(), operator(k, value, &here)?)
                }
                _ => {
                    let mut below = path.clone();
                    below.keys.push(key.clone());
                    self.at_path(value, &below, &here)?
                }
            };
            all.push(node);
        }
        Ok(one_or_all(all))
    }

    /// The operand of `$and` / `$or`: a non-empty list of filters.
    fn list(
        &mut self,
        v: &Value,
        at: &str,
        mut each: impl FnMut(&mut Compiler, &Value, &str) -> Result<Node, FilterError>,
    ) -> Result<Vec<Node>, FilterError> {
        match v {
            Value::Array(items) if !items.is_empty() => items
                .iter()
                .enumerate()
                .map(|(i, item)| each(self, item, &format!("{at}[{i}]")))
                .collect(),
            _ => Err(refuse(at, "must be a non-empty list of filters")),
        }
    }

    fn logical(&mut self, key: &str, items: Vec<Node>) -> Node {
        self.operators += 1;
        if key == "$and" {
            Node::All(items)
        } else {
            Node::Any(items)
        }
    }
}

fn one_or_all(mut all: Vec<Node>) -> Node {
    if all.len() == 1 {
        all.remove(0)
    } else {
        Node::All(all)
    }
}

/// One comparison operator and its checked operand.
fn operator(key: &str, v: &Value, at: &str) -> Result<Op, FilterError> {
    let ordered = || match v {
        Value::Number(_) | Value::String(_) => Ok(v.clone()),
        _ => Err(refuse(at, "must be a number or a string")),
    };
    let scalars = || match v {
        Value::Array(items) if items.iter().all(is_scalar) => Ok(items.clone()),
        _ => Err(refuse(
            at,
            "must be a list of scalars (strings, numbers, booleans, null)",
        )),
    };
    let string = || match v {
        Value::String(s) => Ok(s.clone()),
        _ => Err(refuse(at, "must be a string")),
    };
    Ok(match key {
        "$eq" => Op::Eq(v.clone()),
        "$neq" => Op::Neq(v.clone()),
        "$gt" => Op::Gt(ordered()?),
        "$gte" => Op::Gte(ordered()?),
        "$lt" => Op::Lt(ordered()?),
        "$lte" => Op::Lte(ordered()?),
        "$in" => Op::In(scalars()?),
        "$nin" => Op::Nin(scalars()?),
        "$exists" => match v {
            Value::Bool(b) => Op::Exists(*b),
            _ => return Err(refuse(at, "must be true or false")),
        },
        "$startsWith" => Op::StartsWith(string()?),
        "$endsWith" => Op::EndsWith(string()?),
        _ => {
            return Err(refuse(
                at,
                "is not an operator; known: $eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, \
                 $startsWith, $endsWith, $and, $or, $not",
            ))
        }
    })
}

fn is_scalar(v: &Value) -> bool {
    !matches!(v, Value::Array(_) | Value::Object(_))
}

impl Path {
    /// The value at this path, or `None` if it is missing (a key absent, or a step into
    /// something that is not an object).
    fn resolve<'a>(&self, subject: &'a Subject) -> Option<&'a Value> {
        let mut at = if self.payload {
            &subject.payload
        } else {
            &subject.event_type
        };
        for key in &self.keys {
            at = at.as_object()?.get(key)?;
        }
        Some(at)
    }

    fn name(&self) -> String {
        let mut s = String::from(if self.payload { "payload" } else { "type" });
        for k in &self.keys {
            s.push('.');
            s.push_str(k);
        }
        s
    }
}

impl Node {
    fn matches(&self, subject: &Subject) -> bool {
        match self {
            Node::All(nodes) => nodes.iter().all(|n| n.matches(subject)),
            Node::Any(nodes) => nodes.iter().any(|n| n.matches(subject)),
            Node::Not(node) => !node.matches(subject),
            Node::Test(path, op) => op.test(path.resolve(subject)),
        }
    }

    fn explain(&self, subject: &Subject) -> Option<String> {
        match self {
            Node::All(nodes) => nodes.iter().find_map(|n| n.explain(subject)),
            Node::Any(nodes) => {
                let mut reasons = Vec::with_capacity(nodes.len());
                for n in nodes {
                    reasons.push(n.explain(subject)?);
                }
                Some(format!("no filter of $or matches ({})", reasons.join("; ")))
            }
            Node::Not(node) => match node.explain(subject) {
                Some(_) => None,
                None => Some(format!(
                    "the filter under $not matches ({})",
                    node.describe()
                )),
            },
            Node::Test(path, op) => {
                let found = path.resolve(subject);
                if op.test(found) {
                    return None;
                }
                Some(match found {
                    None => format!("{}: missing", path.name()),
                    Some(v) => format!("{}: {} {}", path.name(), shown(v), op.failed()),
                })
            }
        }
    }

    /// A short description of what the node tests, for `$not`'s reason.
    fn describe(&self) -> String {
        match self {
            Node::Test(path, op) => format!("{} {}", path.name(), op.held()),
            Node::All(_) => "every filter of the list".to_string(),
            Node::Any(_) => "a filter of $or".to_string(),
            Node::Not(_) => "a $not".to_string(),
        }
    }
}

impl Op {
    /// The test on the value at the path (`None`: the path is missing).
    fn test(&self, found: Option<&Value>) -> bool {
        let Some(v) = found else {
            return matches!(self, Op::Exists(false) | Op::Neq(_) | Op::Nin(_));
        };
        match self {
            Op::Eq(x) => equal(v, x),
            Op::Neq(x) => !equal(v, x),
            Op::Gt(x) => order(v, x) == Some(Cmp::Greater),
            Op::Gte(x) => matches!(order(v, x), Some(Cmp::Greater | Cmp::Equal)),
            Op::Lt(x) => order(v, x) == Some(Cmp::Less),
            Op::Lte(x) => matches!(order(v, x), Some(Cmp::Less | Cmp::Equal)),
            Op::In(list) => list.iter().any(|x| equal(v, x)),
            Op::Nin(list) => !list.iter().any(|x| equal(v, x)),
            Op::Exists(want) => *want,
            Op::StartsWith(p) => v.as_str().is_some_and(|s| s.starts_with(p.as_str())),
            Op::EndsWith(p) => v.as_str().is_some_and(|s| s.ends_with(p.as_str())),
        }
    }

    /// What a value that fails this test "is", after the value: `is not >= 100`.
    fn failed(&self) -> String {
        match self {
            Op::Exists(true) => "is not there".to_string(),
            Op::Exists(false) => "is there".to_string(),
            Op::Eq(_) | Op::Gt(_) | Op::Gte(_) | Op::Lt(_) | Op::Lte(_) | Op::In(_) => {
                format!("is not {}", self.held())
            }
            Op::Neq(x) => format!("is {}", shown(x)),
            Op::Nin(_) => format!("is {}", self.held().trim_start_matches("not ")),
            Op::StartsWith(p) => format!("does not start with {}", shown_str(p)),
            Op::EndsWith(p) => format!("does not end with {}", shown_str(p)),
        }
    }

    /// What the test holds, in words: `>= 100`, `in ["a", "b"]`.
    fn held(&self) -> String {
        match self {
            Op::Eq(x) => shown(x),
            Op::Neq(x) => format!("not {}", shown(x)),
            Op::Gt(x) => format!("> {}", shown(x)),
            Op::Gte(x) => format!(">= {}", shown(x)),
            Op::Lt(x) => format!("< {}", shown(x)),
            Op::Lte(x) => format!("<= {}", shown(x)),
            Op::In(xs) => format!("in {}", shown(&Value::Array(xs.clone()))),
            Op::Nin(xs) => format!("not in {}", shown(&Value::Array(xs.clone()))),
            Op::Exists(true) => "exists".to_string(),
            Op::Exists(false) => "is missing".to_string(),
            Op::StartsWith(p) => format!("starts with {}", shown_str(p)),
            Op::EndsWith(p) => format!("ends with {}", shown_str(p)),
        }
    }
}

/// JSON equality, with numbers equal by value (`1` equals `1.0`).
fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y) == Some(Cmp::Equal),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, a)| y.get(k).is_some_and(|b| equal(a, b)))
        }
        _ => a == b,
    }
}

/// Numbers by value, strings by their characters; any other pair is not ordered.
fn order(a: &Value, b: &Value) -> Option<Cmp> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y),
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        _ => None,
    }
}

/// Integers exactly, anything else as `f64`.
fn number_order(a: &Number, b: &Number) -> Option<Cmp> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(x.cmp(&y));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(x.cmp(&y));
    }
    a.as_f64()?.partial_cmp(&b.as_f64()?)
}

/// A value in a reason: compact JSON, cut to a readable length.
fn shown(v: &Value) -> String {
    const LONGEST: usize = 80;
    let mut s = v.to_string();
    if s.len() > LONGEST {
        let mut cut = LONGEST;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        let _ = write!(s, "…");
    }
    s
}

fn shown_str(s: &str) -> String {
    shown(&Value::String(s.to_string()))
}

#[cfg(test)]
#[path = "filter_tests.rs"]
mod tests;
