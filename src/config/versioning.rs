//! The catalog's versioning rule (docs/api.md, "Versioning"): a deprecated type may name the
//! type that replaces it, `replaced_by`. The name must be a declared type, only a deprecated
//! type has a replacement, and following replacements must end at a type that is not replaced
//! (no cycle), so a subscriber told "use X instead" always reaches a type it can move to.

use super::Config;

impl Config {
    /// `catalog.events."TYPE".replaced_by`: every refusal with its key path.
    pub(super) fn check_replacements(&self, err: &mut impl FnMut(&str, String)) {
        let events = &self.catalog.events;
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
            if let Some(cycle) = self.replacement_cycle(ty) {
                if cycle.iter().min() == Some(&ty.as_str()) {
                    err(
                        &key,
                        format!(
                            "forms a cycle ({}); a chain of replacements must end at a type \
                             that is not replaced",
                            cycle.join(" → ")
                        ),
                    );
                }
            }
        }
    }

    /// The cycle `ty` is on, from `ty` back to it (`["a", "b", "a"]`); `None` if following its
    /// replacements ends (at a type not replaced, or an unknown name) or enters a cycle that
    /// does not pass through `ty`.
    fn replacement_cycle<'a>(&'a self, ty: &'a str) -> Option<Vec<&'a str>> {
        let events = &self.catalog.events;
        let mut path = vec![ty];
        let mut at = ty;
        // Each step visits a new type, so the chain is at most as long as the catalog.
        for _ in 0..events.len() {
            let next = events.get(at)?.replaced_by.as_deref()?;
            path.push(next);
            if next == ty {
                return Some(path);
            }
            if path[..path.len() - 1].contains(&next) {
                return None;
            }
            at = next;
        }
        None
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
}
