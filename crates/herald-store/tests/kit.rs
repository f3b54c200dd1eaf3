//! The conformance kit runs every case it has: each `pub async fn name<H: Harness>(s:
//! Subject<H>)` in `src/conformance/` is listed in `conformance_tests!` (a case left out would
//! never run, and nothing else would say so).

use std::path::Path;

/// Whether what follows a function's name is a case's signature: generic over the harness,
/// taking its subject by value (helpers borrow one). Whitespace is already gone.
fn is_case(after_name: &str) -> bool {
    ["<H:Harness>(", "<H:Harness,>("].iter().any(|generics| {
        [
            "s:Subject<H>)",
            "s:Subject<H>,)",
            "muts:Subject<H>)",
            "muts:Subject<H>,)",
        ]
        .iter()
        .any(|params| after_name.starts_with(&format!("{generics}{params}")))
    })
}

#[test]
fn every_case_of_the_kit_is_in_its_macro() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/conformance");
    let macro_text = std::fs::read_to_string(dir.join("mod.rs")).expect("the kit's mod.rs");
    let listed = &macro_text[macro_text
        .find("macro_rules! conformance_tests")
        .expect("the macro")..];
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir).expect("the kit's folder") {
        let path = entry.expect("an entry").path();
        let module = path.file_stem().unwrap().to_string_lossy().to_string();
        let text = std::fs::read_to_string(&path).expect("a kit file");
        // Without whitespace, however rustfmt wrapped the signature.
        let flat: String = text.chars().filter(|c| !c.is_whitespace()).collect();
        for (at, _) in flat.match_indices("pubasyncfn") {
            let rest = &flat[at + "pubasyncfn".len()..];
            let name_end = rest.find('<').unwrap_or(rest.len());
            let (name, after) = rest.split_at(name_end);
            if !is_case(after) {
                continue;
            }
            cases += 1;
            assert!(
                listed.contains(&format!("{module}::{name},")),
                "{module}::{name} is a case of the kit but conformance_tests! does not run it"
            );
        }
    }
    assert!(
        cases >= 31,
        "found only {cases} cases: the kit's layout changed"
    );
}
