//! `estimate` over every corpus model (`tests/corpus/models`) at two sizes: no errors, the peak covers
//! the resident weights and inputs, the formula equals the simulated peak, `max_fitting` is exact.

use std::collections::BTreeMap;
use std::path::PathBuf;

use memplan_ir::ValueKind;
use memplan_sim::estimate::{Analysis, EstimateOptions};

fn models() -> Option<Vec<PathBuf>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/models");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "onnx"))
        .collect();
    v.sort();
    Some(v)
}

#[test]
fn estimate_every_corpus_model_at_two_sizes() {
    let Some(models) = models() else {
        eprintln!("note: tests/corpus/models is absent; corpus estimate test skipped");
        return;
    };
    assert!(!models.is_empty());
    for path in models {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let model = memplan_onnx::import(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        let facts = memplan_ir::infer_model(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            facts.skipped.is_empty(),
            "{name}: {:?}",
            facts.skipped.first()
        );
        let g = &model.graph;
        let an = Analysis::new(g, &facts, &facts.order).unwrap_or_else(|e| panic!("{name}: {e}"));
        for size in [8i64, 24] {
            let dims: BTreeMap<String, i64> = facts
                .symbols
                .declared
                .iter()
                .map(|s| (s.clone(), size))
                .collect();
            let opts = EstimateOptions {
                budget: Some(1 << 30),
                ..Default::default()
            };
            let e = an
                .at(&dims, &opts)
                .unwrap_or_else(|e| panic!("{name} at {size}: {e}"));
            // Resident bytes counted independently of the simulator.
            let mut resident = 0u64;
            for v in g.value_ids() {
                match &g.value(v).kind {
                    ValueKind::Initializer(t) => resident += t.byte_len(),
                    ValueKind::Input => {
                        resident += facts.get(v).bytes().unwrap().eval_map(&dims).unwrap() as u64;
                    }
                    _ => {}
                }
            }
            assert_eq!(e.resident_bytes, resident, "{name} at {size}");
            assert!(
                e.peak_bytes >= resident,
                "{name} at {size}: peak {} < resident {resident}",
                e.peak_bytes
            );
            assert_eq!(e.breakdown.total(), e.peak_bytes, "{name} at {size}");
            assert!(e.arena_bytes >= e.arena_lower_bound, "{name} at {size}");
            let (fp, fstep) = an.formula.eval(&dims).unwrap();
            assert_eq!(
                (fp as u64, fstep),
                (e.peak_bytes, e.peak_step),
                "{name} at {size}: formula"
            );
            let f = e
                .formula
                .as_ref()
                .unwrap_or_else(|| panic!("{name}: no formula"));
            assert!(f.text.starts_with("peak ≈ "), "{name}: {}", f.text);
            let m = e.max_fitting.as_ref().unwrap();
            if let Some(v) = m.value {
                let mut at = dims.clone();
                at.insert(m.symbol.clone(), v);
                let p0 = an.simulate_peak(&at).unwrap().unwrap();
                at.insert(m.symbol.clone(), v + 1);
                let p1 = an.simulate_peak(&at).unwrap().map_or(u64::MAX, |p| p);
                assert!(
                    p0 <= 1 << 30 && p1 > 1 << 30,
                    "{name}: max_fitting {} = {v}",
                    m.symbol
                );
            }
        }
    }
}
