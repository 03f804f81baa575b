//! Estimate over every corpus model (temporary debug).

#[test]
fn debug_bert() {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/corpus/models/bert_encoder.onnx");
    let model = memplan_onnx::import(&p).unwrap();
    let facts = memplan_ir::infer_model(&model).unwrap();
    let an = memplan_sim::estimate::Analysis::new(&model.graph, &facts, &facts.order).unwrap();
    for c in &an.formula.candidates {
        if !c.expr.is_polynomial() { eprintln!("{} {}", c.step, c.expr); }
    }
    eprintln!("n cands {}", an.formula.candidates.len());
}
