//! The catalog's versioning rule (docs/api.md, "Versioning"): a deprecated type may name the
//! type that replaces it, `replaced_by`. The name must be a declared type, only a deprecated
//! type has a replacement, and following replacements must end at a type that is not replaced
//! (no cycle), so a subscriber told "use X instead" always reaches a type it can move to.

use std::collections::HashMap;

use super::Config;

impl Config {
    /// `catalog.events."TYPE".replaced_by`: every refusal with its key path.
    pub(super) fn check_replacements(&self, err: &mut impl FnMut(&str, String)) {
        let events = &self.catalog.events;
        let cycles = self.replacement_cycles();
        for (ty, ev) in events {
            let Some(next) = &ev.replaced_by else {
                continue;
            };
            let key = format!("catalog.events.\"{ty}\".replaced_by");
            if !ev.deprecated {
                err(
                    &key,
                    format!(
                        "names {next:?}, but {ty:?} is not deprecated; set deprecated = true \
                         (only a deprecated type has a replacement)"
                    ),
                );
            }
            if !events.contains_key(next) {
                err(
                    &key,
                    format!(
                        "names {next:?}, which is not a declared type; declare \
                         [catalog.events.{next:?}] first"
                    ),
                );
                continue;
            }
            // A cycle is reported once, at its first type in the catalog's order.
            if let Some(cycle) = cycles.get(ty.as_str()) {
                err(
                    &key,
                    format!(
                        "forms a cycle ({}); a chain of replacements must end at a type that \
                         is not replaced",
                        cycle.join(" → ")
                    ),
                );
            }
        }
    }

    /// Every cycle of replacements, keyed by its first type in the catalog's order, as the
    /// path from that type back to it (`["a", "b", "a"]`). Each type names at most one
    /// replacement, so one walk from each type, stopping at a type an earlier walk passed,
    /// visits every type once: linear in the catalog's size, however long its chains.
    fn replacement_cycles(&self) -> HashMap<&str, Vec<&str>> {
        let events = &self.catalog.events;
        // Types of the walk under way (`false`) or of an earlier one (`true`).
        let mut seen: HashMap<&str, bool> = HashMap::with_capacity(events.len());
        let mut cycles = HashMap::new();
        for start in events.keys() {
            let mut walk: Vec<&str> = Vec::new();
            let mut at = start.as_str();
            loop {
                match seen.get(at) {
                    // Back at a type of this walk: the walk from it on is a cycle.
                    Some(false) => {
                        let from = walk.iter().position(|t| *t == at).unwrap_or(0);
                        let cycle = &walk[from..];
                        let first = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                        let mut path: Vec<&str> = cycle[first..]
                            .iter()
                            .chain(&cycle[..first])
                            .copied()
                            .collect();
                        path.push(cycle[first]);
                        cycles.insert(cycle[first], path);
                        break;
                    }
                    Some(true) => break,
                    None => {}
                }
                seen.insert(at, false);
                walk.push(at);
                match events.get(at).and_then(|e| e.replaced_by.as_deref()) {
                    Some(next) if events.contains_key(next) => at = next,
                    _ => break,
                }
            }
            for t in walk {
                seen.insert(t, true);
            }
        }
        cycles
    }
}

#[cfg(test)]
mod tests {
    use crate::config::problems;
    use crate::config::Config;

    #[test]
    fn a_deprecated_type_may_name_its_declared_replacement() {
        let toml = "[catalog.events.\"invoice.paid\"]\ndeprecated = true\n\
                    replaced_by = \"invoice.paid.v2\"\n[catalog.events.\"invoice.paid.v2\"]\n";
        assert_eq!(problems(toml), Vec::new());
        let c = Config::from_toml(toml).unwrap();
        assert_eq!(
            c.catalog.events["invoice.paid"].replaced_by.as_deref(),
            Some("invoice.paid.v2")
        );
    }

    #[test]
    fn replaced_by_on_a_type_that_is_not_deprecated_is_refused() {
        let p = problems(
            "[catalog.events.\"invoice.paid\"]\nreplaced_by = \"invoice.paid.v2\"\n\
             [catalog.events.\"invoice.paid.v2\"]\n",
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "catalog.events.\"invoice.paid\".replaced_by");
        assert!(p[0].1.contains("is not deprecated"), "{p:?}");
    }

    #[test]
    fn replaced_by_naming_an_unknown_type_is_refused() {
        let p = problems(
            "[catalog.events.\"invoice.paid\"]\ndeprecated = true\nreplaced_by = \"invoice.payed.v2\"\n",
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "catalog.events.\"invoice.paid\".replaced_by");
        assert!(
            p[0].1
                .contains("\"invoice.payed.v2\", which is not a declared type"),
            "{p:?}"
        );
    }

    #[test]
    fn replacements_forming_a_cycle_are_refused_once() {
        let p = problems(
            "[catalog.events.a]\ndeprecated = true\nreplaced_by = \"b\"\n\
             [catalog.events.b]\ndeprecated = true\nreplaced_by = \"c\"\n\
             [catalog.events.c]\ndeprecated = true\nreplaced_by = \"a\"\n\
             [catalog.events.d]\ndeprecated = true\nreplaced_by = \"b\"\n",
        );
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "catalog.events.\"a\".replaced_by");
        assert!(p[0].1.contains("forms a cycle (a → b → c → a)"), "{p:?}");
        let p = problems("[catalog.events.a]\ndeprecated = true\nreplaced_by = \"a\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].1.contains("forms a cycle (a → a)"), "{p:?}");
    }

    #[test]
    fn a_chain_of_replacements_that_ends_is_accepted() {
        let p = problems(
            "[catalog.events.a]\ndeprecated = true\nreplaced_by = \"b\"\n\
             [catalog.events.b]\ndeprecated = true\nreplaced_by = \"c\"\n\
             [catalog.events.c]\n",
        );
        assert_eq!(p, Vec::new());
    }

    #[test]
    fn long_chains_and_a_long_cycle_are_each_walked_once() {
        let chain = |n: usize, back_to_start: bool| {
            let mut t = String::new();
            for i in 0..n {
                let next = if i + 1 < n {
                    format!("t{:05}", i + 1)
                } else {
                    "t00000".into()
                };
                t.push_str(&format!("[catalog.events.t{i:05}]\n"));
                if i + 1 < n || back_to_start {
                    t.push_str(&format!("deprecated = true\nreplaced_by = \"{next}\"\n"));
                }
            }
            t
        };
        assert_eq!(problems(&chain(2000, false)), Vec::new());
        let p = problems(&chain(2000, true));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].0, "catalog.events.\"t00000\".replaced_by");
        assert!(p[0].1.contains("(t00000 → t00001 → "), "{}", &p[0].1[..80]);
        assert!(p[0].1.contains(" → t01999 → t00000)"));
    }
}
