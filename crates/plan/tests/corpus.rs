//! The planner on the corpus: every model (both exporters) at the two fixture sizes and a third,
//! larger one. The plan passes the checker (inside `optimize`, and again for the reordered graph after
//! a save and re-import), the planned peak never exceeds the graph-order estimate, and the
//! before/after table is a snapshot (`UPDATE_EXPECT=1` refreshes it).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use memplan_plan::{check, optimize, reorder, Options};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (file stem, dims) for every fixture size plus the larger size doubled.
fn cases() -> Vec<(String, BTreeMap<String, i64>)> {
    let dir = repo().join("tests/fixtures/ort_shapes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let mut by_model: BTreeMap<String, Vec<BTreeMap<String, i64>>> = BTreeMap::new();
    for f in files {
        let stem = f.file_stem().unwrap().to_str().unwrap().to_string();
        let (model, _) = stem.rsplit_once('.').unwrap();
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        let dims: BTreeMap<String, i64> = j["dims"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_i64().unwrap()))
            .collect();
        by_model.entry(model.to_string()).or_default().push(dims);
    }
    let mut out = Vec::new();
    for (model, mut sizes) in by_model {
        sizes.sort_by_key(|d| d.values().sum::<i64>());
        let big: BTreeMap<String, i64> = sizes
            .last()
            .unwrap()
            .iter()
            .map(|(k, &v)| (k.clone(), v * 2))
            .collect();
        sizes.push(big);
        out.extend(sizes.into_iter().map(|d| (model.clone(), d)));
    }
    out
}

#[test]
fn corpus_plans_are_valid_and_never_worse_than_graph_order() {
    let opts = Options {
        // Deterministic: only the state limit stops the exact search.
        exact_work: usize::MAX,
        ..Options::default()
    };
    let tmp = std::env::temp_dir().join(format!("memplan-plan-corpus-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let mut table = String::new();
    for (stem, dims) in cases() {
        let path = repo().join(format!("tests/corpus/models/{stem}.onnx"));
        let model = memplan_onnx::import(&path).unwrap();
        let facts = memplan_ir::infer_model(&model).unwrap();
        let out = optimize(&model.graph, &facts, &dims, &opts).unwrap();
        let r = &out.report;
        let d: Vec<String> = dims.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert!(
            r.peak_bytes_after <= r.peak_bytes_before,
            "{stem} {d:?}: {r:?}"
        );
        table.push_str(&format!(
            "{stem:<36} {:<22} {:>10} -> {:>10} {:>+6.1}%  arena {:>9} bound {:>9}\n",
            d.join(","),
            r.peak_bytes_before,
            r.peak_bytes_after,
            (r.peak_bytes_after as f64 / r.peak_bytes_before as f64 - 1.0) * 100.0,
            r.arena_bytes,
            r.arena_lower_bound,
        ));
        // The reordered model, written and read back, accepts the renumbered plan.
        let schedule = out.plan.node_order();
        let mut m2 = model.clone();
        m2.graph = reorder(&model.graph, &schedule);
        let file = tmp.join(format!("{stem}.onnx"));
        memplan_onnx::save(&m2, &file, memplan_onnx::default_mode(&model)).unwrap();
        let back = memplan_onnx::import(&file).unwrap();
        let back_facts = memplan_ir::infer_model(&back).unwrap();
        let plan = out.plan.renumbered_in_schedule_order();
        check(&back.graph, &back_facts, &plan).unwrap_or_else(|e| panic!("{stem}: {e}"));
        // A plan for the original graph does not fit the reordered one unless the order is unchanged.
        if plan != out.plan {
            assert!(
                check(&back.graph, &back_facts, &out.plan).is_err(),
                "{stem}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&tmp);
    expect_test::expect![[r#"
        bert_encoder                         B=2,S=40                 10843081 ->   10515433   -3.0%  arena    750168 bound    750136
        bert_encoder                         B=1,S=128                11535561 ->   11011305   -4.5%  arena   1245272 bound   1245240
        bert_encoder                         B=2,S=256                17112265 ->   15015145  -12.3%  arena   5242968 bound   5242936
        bert_encoder.legacy                  B=2,S=40                 10800524 ->   10472836   -3.0%  arena    740484 bound    740484
        bert_encoder.legacy                  B=1,S=128                11453452 ->   10929156   -4.6%  arena   1196036 bound   1196036
        bert_encoder.legacy                  B=2,S=256                16686092 ->   14589192  -12.6%  arena   4849928 bound   4849728
        gpt2_decoder                         B=2,S=40                 10925513 ->   10925513   +0.0%  arena   1458176 bound   1458176
        gpt2_decoder                         B=1,S=128                11761977 ->   11172041   -5.0%  arena   1703936 bound   1703936
        gpt2_decoder                         B=2,S=256                18911545 ->   16290273  -13.9%  arena   6816024 bound   6815872
        gpt2_decoder.legacy                  B=2,S=40                 11911588 ->   11258308   -5.5%  arena    742596 bound    740752
        gpt2_decoder.legacy                  B=1,S=128                12761124 ->   11714628   -8.2%  arena   1198148 bound   1196304
        gpt2_decoder.legacy                  B=2,S=256                19566628 ->   15899652  -18.7%  arena   5377028 bound   5374340
        logspace_matrix_chain                n=4,t=24                 16002176 ->   13473928  -15.8%  arena  11799576 bound  11796480
        logspace_matrix_chain                n=8,t=64                 81404032 ->   67911816  -16.6%  arena  62922776 bound  62914560
        logspace_matrix_chain                n=16,t=128              317735040 ->  263749768  -17.0%  arena 251674648 bound 251658240
        logspace_matrix_chain.legacy         n=4,t=24                 16002088 ->   13489096  -15.7%  arena  11814856 bound  11812224
        logspace_matrix_chain.legacy         n=8,t=64                 81403944 ->   67980232  -16.5%  arena  62991304 bound  62988672
        logspace_matrix_chain.legacy         n=16,t=128              317734952 ->  264014792  -16.9%  arena 251939784 bound 251937152
        of3_attn_pair_bias                   N=48                       735204 ->     722724   -1.7%  arena    331776 bound    331776
        of3_attn_pair_bias                   N=64                      1230948 ->    1214308   -1.4%  arena    589824 bound    589824
        of3_attn_pair_bias                   N=128                     4606564 ->    4573284   -0.7%  arena   2359296 bound   2359296
        of3_attn_pair_bias.legacy            N=48                       735104 ->     735104   +0.0%  arena    344256 bound    344256
        of3_attn_pair_bias.legacy            N=64                      1230848 ->    1230848   +0.0%  arena    606464 bound    606464
        of3_attn_pair_bias.legacy            N=128                     4606464 ->    4606464   +0.0%  arena   2392576 bound   2392576
        of3_pair_transition                  N=48                      4187400 ->    3007752  -28.2%  arena   2654208 bound   2654208
        of3_pair_transition                  N=64                      7405832 ->    5308680  -28.3%  arena   4718592 bound   4718592
        of3_pair_transition                  N=128                    29475080 ->   21086472  -28.5%  arena  18874368 bound  18874368
        of3_pair_transition.legacy           N=48                      4187392 ->    3007744  -28.2%  arena   2654208 bound   2654208
        of3_pair_transition.legacy           N=64                      7405824 ->    5308672  -28.3%  arena   4718592 bound   4718592
        of3_pair_transition.legacy           N=128                    29475072 ->   21086464  -28.5%  arena  18874368 bound  18874368
        of3_pairformer_block                 N=48                      4867676 ->    3688028  -24.2%  arena   2949120 bound   2949120
        of3_pairformer_block                 N=64                      8319644 ->    6746812  -18.9%  arena   5767200 bound   5767200
        of3_pairformer_block                 N=128                    42660836 ->   42464188   -0.5%  arena  39845920 bound  39845920
        of3_pairformer_block.legacy          N=48                      4867520 ->    3687872  -24.2%  arena   2949120 bound   2949120
        of3_pairformer_block.legacy          N=64                      8319488 ->    6746624  -18.9%  arena   5767168 bound   5767168
        of3_pairformer_block.legacy          N=128                    42660608 ->   42464000   -0.5%  arena  39845888 bound  39845888
        of3_token_frame_atoms_gather         N_atom=145,N_token=40      600281 ->     347445  -42.1%  arena    336452 bound    336400
        of3_token_frame_atoms_gather         N_atom=461,N_token=128    5985097 ->    3433013  -42.6%  arena   3400356 bound   3400336
        of3_token_frame_atoms_gather         N_atom=922,N_token=256   23870249 ->   13665561  -42.8%  arena  13601360 bound  13601344
        of3_token_frame_atoms_gather.legacy  N_atom=145,N_token=40      599020 ->     431168  -28.0%  arena    421448 bound    421104
        of3_token_frame_atoms_gather.legacy  N_atom=461,N_token=128    5983484 ->    4283520  -28.4%  arena   4252488 bound   4252288
        of3_token_frame_atoms_gather.legacy  N_atom=922,N_token=256   23868124 ->   17067704  -28.5%  arena  17005640 bound  17005392
        of3_tri_att_start                    N=48                      2712204 ->    2389668  -11.9%  arena   2064480 bound   2064456
        of3_tri_att_start                    N=64                      5853836 ->    5280420   -9.8%  arena   4718688 bound   4718664
        of3_tri_att_start                    N=128                    40129164 ->   37835428   -5.7%  arena  35651680 bound  35651656
        of3_tri_att_start.legacy             N=48                      2712064 ->    2684416   -1.0%  arena   2359296 bound   2359296
        of3_tri_att_start.legacy             N=64                      5853696 ->    5804544   -0.8%  arena   5242880 bound   5242880
        of3_tri_att_start.legacy             N=128                    40129024 ->   39932416   -0.5%  arena  37748736 bound  37748736
        of3_tri_mul_out                      N=48                      1803784 ->    1508872  -16.3%  arena   1179648 bound   1179648
        of3_tri_mul_out                      N=64                      3187208 ->    2662920  -16.4%  arena   2097152 bound   2097152
        of3_tri_mul_out                      N=128                    12673544 ->   10576392  -16.5%  arena   8388608 bound   8388608
        of3_tri_mul_out.legacy               N=48                      1803776 ->    1508864  -16.3%  arena   1179648 bound   1179648
        of3_tri_mul_out.legacy               N=64                      3187200 ->    2662912  -16.4%  arena   2097152 bound   2097152
        of3_tri_mul_out.legacy               N=128                    12673536 ->   10576384  -16.5%  arena   8388608 bound   8388608
    "#]].assert_eq(&table);
}
