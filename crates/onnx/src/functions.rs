//! Inlining of model-local functions (`ModelProto.functions`) into the graphs that call them.
//!
//! A node calls a local function when its `(domain, op_type, overload)` equals the function's
//! `(domain, name, overload)` (the domains `""` and `"ai.onnx"` are the same). Each call is replaced by
//! a copy of the function body in which:
//! - formal inputs are the call's actual inputs (missing trailing inputs become `""`, "not given");
//! - formal outputs are the call's outputs; every other value defined in the body (node outputs,
//!   subgraph inputs and initializers, at any depth) gets a fresh name `<prefix>/<name>`, unique in the
//!   whole model, where `<prefix>` is the call node's name (or the function's name) made unique;
//! - node names become `<prefix>/<name>`;
//! - attributes with `ref_attr_name = r` take the call's attribute `r`, else the function's default
//!   (`attribute_proto`) named `r`, else are dropped (the op's own default applies);
//! - a formal output that is not produced by a body node (it is a formal input, or listed twice) is
//!   given to the call's output by an `Identity` node.
//!
//! Calls inside the body and inside subgraphs (If/Loop/Scan bodies) at any depth are inlined too;
//! a function that calls itself, directly or not, is an error. Afterwards `model.functions` is empty
//! and the functions' opset imports are merged into the model's.

use std::collections::{BTreeMap, BTreeSet};

use crate::error::OnnxError;
use crate::proto::{
    AttributeProto, FunctionProto, GraphProto, ModelProto, NodeProto, ValueInfoProto,
};
use memplan_ir::graph::Names;

type FnKey = (String, String, String);

fn norm_domain(d: Option<&str>) -> String {
    match d.unwrap_or("") {
        "ai.onnx" => String::new(),
        d => d.to_string(),
    }
}

fn fn_key(f: &FunctionProto) -> FnKey {
    (
        norm_domain(f.domain.as_deref()),
        f.name.clone().unwrap_or_default(),
        f.overload.clone().unwrap_or_default(),
    )
}

fn call_key(n: &NodeProto) -> FnKey {
    (
        norm_domain(n.domain.as_deref()),
        n.op_type.clone().unwrap_or_default(),
        n.overload.clone().unwrap_or_default(),
    )
}

/// `domain:name` (and `:overload` when set), the spelling used in errors.
fn display_key(k: &FnKey) -> String {
    let mut s = if k.0.is_empty() {
        k.1.clone()
    } else {
        format!("{}:{}", k.0, k.1)
    };
    if !k.2.is_empty() {
        s.push(':');
        s.push_str(&k.2);
    }
    s
}

struct Ctx<'a> {
    functions: &'a [FunctionProto],
    keys: Vec<FnKey>,
    by_key: BTreeMap<FnKey, usize>,
    /// Every value name in the model, including the fresh ones handed out so far.
    used_values: Names,
    used_prefixes: Names,
    /// Functions inlined at least once, in order of first use.
    inlined: Vec<usize>,
}

/// Inlines every call of a model-local function, in the main graph and all its subgraphs, and removes
/// the local functions. See the module documentation for the renaming and attribute rules.
///
/// Errors (naming the function): two functions with one key, a recursive call chain, a call with more
/// inputs or outputs than the function declares, a body value that is neither a formal input nor
/// defined in the body, a formal output never produced, and an opset version conflict between a
/// function's imports and the model's.
pub fn inline_functions(model: &mut ModelProto) -> Result<(), OnnxError> {
    if model.functions.is_empty() {
        return Ok(());
    }
    let functions = std::mem::take(&mut model.functions);
    let keys: Vec<FnKey> = functions.iter().map(fn_key).collect();
    let mut by_key = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        if by_key.insert(k.clone(), i).is_some() {
            model.functions = functions;
            return Err(OnnxError::function(
                &display_key(k),
                "defined twice in ModelProto.functions",
            ));
        }
    }
    let mut used_values = BTreeSet::new();
    if let Some(g) = &model.graph {
        collect_graph_names(g, &mut used_values);
    }
    let mut ctx = Ctx {
        functions: &functions,
        keys,
        by_key,
        used_values: Names::taken(used_values),
        used_prefixes: Names::default(),
        inlined: Vec::new(),
    };
    let result = match model.graph.as_mut() {
        Some(g) => expand_graph(g, &mut Vec::new(), &mut ctx),
        None => Ok(()),
    };
    if let Err(e) = result {
        model.functions = functions;
        return Err(e);
    }
    for &fi in &ctx.inlined {
        let f = &functions[fi];
        for imp in &f.opset_import {
            let dom = norm_domain(imp.domain.as_deref());
            match model
                .opset_import
                .iter()
                .find(|m| norm_domain(m.domain.as_deref()) == dom)
            {
                Some(m) if m.version != imp.version => {
                    let err = OnnxError::function(
                        &display_key(&ctx.keys[fi]),
                        format!(
                            "imports opset '{dom}' version {} but the model imports version {}",
                            imp.version.unwrap_or(0),
                            m.version.unwrap_or(0)
                        ),
                    );
                    model.functions = functions;
                    return Err(err);
                }
                Some(_) => {}
                None => model.opset_import.push(imp.clone()),
            }
        }
    }
    Ok(())
}

fn collect_graph_names(g: &GraphProto, out: &mut BTreeSet<String>) {
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        out.insert(v.name.clone().unwrap_or_default());
    }
    for t in &g.initializer {
        out.insert(t.name.clone().unwrap_or_default());
    }
    for s in &g.sparse_initializer {
        if let Some(v) = &s.values {
            out.insert(v.name.clone().unwrap_or_default());
        }
    }
    for n in &g.node {
        out.extend(n.input.iter().chain(&n.output).cloned());
        for a in &n.attribute {
            for sg in a.g.iter().chain(&a.graphs) {
                collect_graph_names(sg, out);
            }
        }
    }
    out.remove("");
}

fn expand_graph(
    g: &mut GraphProto,
    stack: &mut Vec<usize>,
    ctx: &mut Ctx,
) -> Result<(), OnnxError> {
    let nodes = std::mem::take(&mut g.node);
    let mut value_info = Vec::new();
    g.node = expand_nodes(nodes, stack, ctx, &mut value_info)?;
    g.value_info.extend(value_info);
    Ok(())
}

fn expand_nodes(
    nodes: Vec<NodeProto>,
    stack: &mut Vec<usize>,
    ctx: &mut Ctx,
    value_info: &mut Vec<ValueInfoProto>,
) -> Result<Vec<NodeProto>, OnnxError> {
    let mut out = Vec::with_capacity(nodes.len());
    for mut node in nodes {
        for a in &mut node.attribute {
            for sg in a.g.iter_mut().chain(a.graphs.iter_mut()) {
                expand_graph(sg, stack, ctx)?;
            }
        }
        let Some(&fi) = ctx.by_key.get(&call_key(&node)) else {
            out.push(node);
            continue;
        };
        if let Some(pos) = stack.iter().position(|&s| s == fi) {
            let chain: Vec<String> = stack[pos..]
                .iter()
                .chain([&fi])
                .map(|&i| display_key(&ctx.keys[i]))
                .collect();
            return Err(OnnxError::function(
                &display_key(&ctx.keys[fi]),
                format!("recursive call chain {}", chain.join(" -> ")),
            ));
        }
        if !ctx.inlined.contains(&fi) {
            ctx.inlined.push(fi);
        }
        let (body, vis) = instantiate(fi, &node, ctx)?;
        stack.push(fi);
        let expanded = expand_nodes(body, stack, ctx, value_info)?;
        stack.pop();
        value_info.extend(vis);
        out.extend(expanded);
    }
    Ok(out)
}

/// Values defined inside a graph at any depth (its inputs, initializers and node outputs).
fn collect_defs(g: &GraphProto, out: &mut Vec<String>) {
    for v in &g.input {
        out.push(v.name.clone().unwrap_or_default());
    }
    for t in &g.initializer {
        out.push(t.name.clone().unwrap_or_default());
    }
    for s in &g.sparse_initializer {
        if let Some(v) = &s.values {
            out.push(v.name.clone().unwrap_or_default());
        }
    }
    collect_node_defs(&g.node, out);
}

fn collect_node_defs(nodes: &[NodeProto], out: &mut Vec<String>) {
    for n in nodes {
        out.extend(n.output.iter().cloned());
        for a in &n.attribute {
            for sg in a.g.iter().chain(&a.graphs) {
                collect_defs(sg, out);
            }
        }
    }
}

/// One call's copy of the function body: renamed, attribute references resolved; plus the function's
/// value_info for the values it defines.
fn instantiate(
    fi: usize,
    call: &NodeProto,
    ctx: &mut Ctx,
) -> Result<(Vec<NodeProto>, Vec<ValueInfoProto>), OnnxError> {
    let f = &ctx.functions[fi];
    let fname = display_key(&ctx.keys[fi]);
    let call_name = call.name.clone().unwrap_or_default();
    let err = |reason: String| OnnxError::function(&fname, reason);
    if call.input.len() > f.input.len() || call.output.len() > f.output.len() {
        return Err(err(format!(
            "node '{call_name}' passes {} inputs and {} outputs, the function declares {} and {}",
            call.input.len(),
            call.output.len(),
            f.input.len(),
            f.output.len()
        )));
    }
    let prefix_base = if call_name.is_empty() {
        f.name.clone().unwrap_or_default()
    } else {
        call_name.clone()
    };
    let prefix = ctx.used_prefixes.fresh(&prefix_base);

    let mut map: BTreeMap<String, String> = BTreeMap::new();
    for (i, formal) in f.input.iter().enumerate() {
        map.insert(
            formal.clone(),
            call.input.get(i).cloned().unwrap_or_default(),
        );
    }
    let formal_inputs: BTreeSet<&String> = f.input.iter().collect();

    // Top-level outputs may be claimed by formal outputs; everything else is fresh.
    let mut top_defs = Vec::new();
    for n in &f.node {
        top_defs.extend(n.output.iter().cloned());
    }
    let mut inner_defs = Vec::new();
    for n in &f.node {
        for a in &n.attribute {
            for sg in a.g.iter().chain(&a.graphs) {
                collect_defs(sg, &mut inner_defs);
            }
        }
    }
    let mut claimed = vec![false; f.output.len()];
    let mut defined = BTreeSet::new();
    for d in top_defs.iter().chain(&inner_defs) {
        if d.is_empty() {
            continue;
        }
        if formal_inputs.contains(d) {
            return Err(err(format!("the body redefines the function input '{d}'")));
        }
        if !defined.insert(d.clone()) {
            return Err(err(format!("the body defines '{d}' twice")));
        }
    }
    for d in &top_defs {
        if d.is_empty() {
            continue;
        }
        let j = f.output.iter().position(|o| o == d);
        let target = match j {
            Some(j) if !claimed[j] && call.output.get(j).is_some_and(|o| !o.is_empty()) => {
                claimed[j] = true;
                call.output[j].clone()
            }
            _ => ctx.used_values.fresh(&format!("{prefix}/{d}")),
        };
        map.insert(d.clone(), target);
    }
    for d in &inner_defs {
        if !d.is_empty() {
            map.insert(d.clone(), ctx.used_values.fresh(&format!("{prefix}/{d}")));
        }
    }

    let attrs = AttrScope { call, function: f };
    let mut body = Vec::with_capacity(f.node.len());
    for n in &f.node {
        body.push(rename_node(n, &map, &prefix, &attrs).map_err(&err)?);
    }
    for (j, formal) in f.output.iter().enumerate() {
        let Some(target) = call.output.get(j).filter(|o| !o.is_empty()) else {
            continue;
        };
        if claimed[j] {
            continue;
        }
        let src = map
            .get(formal)
            .ok_or_else(|| err(format!("output '{formal}' is never produced by the body")))?;
        body.push(NodeProto {
            name: Some(format!("{prefix}/Identity_{formal}")),
            op_type: Some("Identity".into()),
            input: vec![src.clone()],
            output: vec![target.clone()],
            ..Default::default()
        });
    }
    let vis = f
        .value_info
        .iter()
        .filter_map(|vi| {
            let name = vi.name.as_deref()?;
            if !defined.contains(name) {
                return None;
            }
            let mut vi = vi.clone();
            vi.name = map.get(name).cloned();
            Some(vi)
        })
        .collect();
    Ok((body, vis))
}

struct AttrScope<'a> {
    call: &'a NodeProto,
    function: &'a FunctionProto,
}

impl AttrScope<'_> {
    /// The value of a reference `r` named `as_name` in the body; `None` when neither the call nor the
    /// function's defaults give it.
    fn resolve(&self, r: &str, as_name: Option<&String>) -> Option<AttributeProto> {
        let found = self
            .call
            .attribute
            .iter()
            .find(|a| a.name.as_deref() == Some(r))
            .or_else(|| {
                self.function
                    .attribute_proto
                    .iter()
                    .find(|a| a.name.as_deref() == Some(r))
            })?;
        let mut a = found.clone();
        a.name = as_name.cloned();
        a.ref_attr_name = None;
        Some(a)
    }
}

fn rename_value(name: &str, map: &BTreeMap<String, String>, node: &str) -> Result<String, String> {
    if name.is_empty() {
        return Ok(String::new());
    }
    map.get(name).cloned().ok_or_else(|| {
        format!("node '{node}' uses '{name}', which is neither a function input nor defined in the body")
    })
}

fn rename_node(
    n: &NodeProto,
    map: &BTreeMap<String, String>,
    prefix: &str,
    attrs: &AttrScope,
) -> Result<NodeProto, String> {
    let orig = n
        .name
        .clone()
        .unwrap_or_else(|| n.op_type.clone().unwrap_or_default());
    let mut out = n.clone();
    out.name = Some(format!("{prefix}/{orig}"));
    out.input = n
        .input
        .iter()
        .map(|v| rename_value(v, map, &orig))
        .collect::<Result<_, _>>()?;
    out.output = n
        .output
        .iter()
        .map(|v| rename_value(v, map, &orig))
        .collect::<Result<_, _>>()?;
    out.attribute = Vec::with_capacity(n.attribute.len());
    for a in &n.attribute {
        let mut a = match a.ref_attr_name.as_deref().filter(|r| !r.is_empty()) {
            Some(r) => match attrs.resolve(r, a.name.as_ref()) {
                Some(resolved) => resolved,
                None => continue,
            },
            None => a.clone(),
        };
        if let Some(g) = &mut a.g {
            *g = rename_graph(g, map, prefix, attrs)?;
        }
        for g in &mut a.graphs {
            *g = rename_graph(g, map, prefix, attrs)?;
        }
        out.attribute.push(a);
    }
    Ok(out)
}

fn rename_graph(
    g: &GraphProto,
    map: &BTreeMap<String, String>,
    prefix: &str,
    attrs: &AttrScope,
) -> Result<GraphProto, String> {
    let mut out = g.clone();
    let graph = g.name.clone().unwrap_or_default();
    let vi = |v: &ValueInfoProto| -> Result<ValueInfoProto, String> {
        let mut v = v.clone();
        v.name = Some(rename_value(v.name.as_deref().unwrap_or(""), map, &graph)?);
        Ok(v)
    };
    out.input = g.input.iter().map(vi).collect::<Result<_, _>>()?;
    out.output = g.output.iter().map(vi).collect::<Result<_, _>>()?;
    out.value_info = g
        .value_info
        .iter()
        .filter(|v| map.contains_key(v.name.as_deref().unwrap_or("")))
        .map(vi)
        .collect::<Result<_, _>>()?;
    for t in &mut out.initializer {
        t.name = Some(rename_value(t.name.as_deref().unwrap_or(""), map, &graph)?);
    }
    for s in &mut out.sparse_initializer {
        if let Some(v) = &mut s.values {
            v.name = Some(rename_value(v.name.as_deref().unwrap_or(""), map, &graph)?);
        }
    }
    out.node = g
        .node
        .iter()
        .map(|n| rename_node(n, map, prefix, attrs))
        .collect::<Result<_, _>>()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{attribute_proto::AttributeType, OperatorSetIdProto};

    fn node(
        name: &str,
        op: &str,
        domain: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: Vec<AttributeProto>,
    ) -> NodeProto {
        NodeProto {
            name: Some(name.into()),
            op_type: Some(op.into()),
            domain: (!domain.is_empty()).then(|| domain.into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs,
            ..Default::default()
        }
    }

    fn attr_f(name: &str, v: f32) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(v),
            ..Default::default()
        }
    }

    fn attr_ref(name: &str, r: &str) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Float as i32),
            ref_attr_name: Some(r.into()),
            ..Default::default()
        }
    }

    fn attr_g(name: &str, g: GraphProto) -> AttributeProto {
        AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Graph as i32),
            g: Some(g),
            ..Default::default()
        }
    }

    fn vi(name: &str) -> ValueInfoProto {
        ValueInfoProto {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn opset(domain: &str, v: i64) -> OperatorSetIdProto {
        OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(v),
        }
    }

    fn function(
        name: &str,
        inputs: &[&str],
        outputs: &[&str],
        attrs: &[&str],
        defaults: Vec<AttributeProto>,
        nodes: Vec<NodeProto>,
    ) -> FunctionProto {
        FunctionProto {
            name: Some(name.into()),
            domain: Some("local".into()),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            attribute: attrs.iter().map(|s| s.to_string()).collect(),
            attribute_proto: defaults,
            node: nodes,
            opset_import: vec![opset("", 18)],
            ..Default::default()
        }
    }

    /// Inner(a) -> b: s = Mul(a, a); l = LeakyRelu(s, alpha=@alpha); b = Elu(l, alpha=@beta (default 2)).
    fn inner() -> FunctionProto {
        function(
            "Inner",
            &["a"],
            &["b"],
            &["alpha"],
            vec![attr_f("beta", 2.0)],
            vec![
                node("sq", "Mul", "", &["a", "a"], &["s"], vec![]),
                node(
                    "lr",
                    "LeakyRelu",
                    "",
                    &["s"],
                    &["l"],
                    vec![attr_ref("alpha", "alpha")],
                ),
                node(
                    "elu",
                    "Elu",
                    "",
                    &["l"],
                    &["b"],
                    vec![attr_ref("alpha", "beta")],
                ),
            ],
        )
    }

    /// Outer(x, y) -> (z, x): t = Inner(x, alpha=@gain); z = Add(t, y); the input x is also an output.
    fn outer() -> FunctionProto {
        function(
            "Outer",
            &["x", "y"],
            &["z", "x"],
            &["gain"],
            vec![],
            vec![
                node(
                    "call_inner",
                    "Inner",
                    "local",
                    &["x"],
                    &["t"],
                    vec![attr_ref("alpha", "gain")],
                ),
                node("add", "Add", "", &["t", "y"], &["z"], vec![]),
            ],
        )
    }

    fn dump_graph(g: &GraphProto, indent: usize, out: &mut String) {
        for n in &g.node {
            let attrs: Vec<String> = n
                .attribute
                .iter()
                .map(|a| match (&a.f, &a.g) {
                    (Some(f), _) => format!("{}={f}", a.name.as_deref().unwrap_or("")),
                    (_, Some(_)) => format!("{}=<graph>", a.name.as_deref().unwrap_or("")),
                    _ => format!("{}=?", a.name.as_deref().unwrap_or("")),
                })
                .collect();
            out.push_str(&format!(
                "{:indent$}{} {}({}) -> {} [{}]\n",
                "",
                n.op_type.as_deref().unwrap_or(""),
                n.name.as_deref().unwrap_or(""),
                n.input.join(", "),
                n.output.join(", "),
                attrs.join(", "),
            ));
            for a in &n.attribute {
                if let Some(g) = &a.g {
                    out.push_str(&format!(
                        "{:indent$}  {}: outputs {:?}\n",
                        "",
                        a.name.as_deref().unwrap_or(""),
                        g.output
                            .iter()
                            .map(|v| v.name.clone().unwrap_or_default())
                            .collect::<Vec<_>>()
                    ));
                    dump_graph(g, indent + 4, out);
                }
            }
        }
    }

    fn test_model() -> ModelProto {
        let then_branch = GraphProto {
            name: Some("then".into()),
            node: vec![node(
                "i3",
                "Inner",
                "local",
                &["Z2"],
                &["T3"],
                vec![attr_f("alpha", 0.25), attr_f("beta", 4.0)],
            )],
            output: vec![vi("T3")],
            ..Default::default()
        };
        let else_branch = GraphProto {
            name: Some("else".into()),
            node: vec![node("id", "Identity", "", &["Z2"], &["E"], vec![])],
            output: vec![vi("E")],
            ..Default::default()
        };
        ModelProto {
            ir_version: Some(10),
            opset_import: vec![opset("", 18), opset("local", 1)],
            graph: Some(GraphProto {
                name: Some("main".into()),
                input: vec![vi("X"), vi("Y"), vi("C")],
                output: vec![vi("W1"), vi("R")],
                node: vec![
                    node(
                        "o1",
                        "Outer",
                        "local",
                        &["X", "Y"],
                        &["Z1", "W1"],
                        vec![attr_f("gain", 0.5)],
                    ),
                    node("o2", "Outer", "local", &["Z1", "Y"], &["Z2"], vec![]),
                    node(
                        "if",
                        "If",
                        "",
                        &["C"],
                        &["R"],
                        vec![
                            attr_g("then_branch", then_branch),
                            attr_g("else_branch", else_branch),
                        ],
                    ),
                ],
                ..Default::default()
            }),
            functions: vec![outer(), inner()],
            ..Default::default()
        }
    }

    #[test]
    fn nested_functions_are_inlined_with_fresh_names_and_attributes() {
        let mut m = test_model();
        inline_functions(&mut m).unwrap();
        assert!(m.functions.is_empty());
        let mut text = String::new();
        dump_graph(m.graph.as_ref().unwrap(), 0, &mut text);
        expect_test::expect![[r#"
            Mul o1/call_inner/sq(X, X) -> o1/call_inner/s []
            LeakyRelu o1/call_inner/lr(o1/call_inner/s) -> o1/call_inner/l [alpha=0.5]
            Elu o1/call_inner/elu(o1/call_inner/l) -> o1/t [alpha=2]
            Add o1/add(o1/t, Y) -> Z1 []
            Identity o1/Identity_x(X) -> W1 []
            Mul o2/call_inner/sq(Z1, Z1) -> o2/call_inner/s []
            LeakyRelu o2/call_inner/lr(o2/call_inner/s) -> o2/call_inner/l []
            Elu o2/call_inner/elu(o2/call_inner/l) -> o2/t [alpha=2]
            Add o2/add(o2/t, Y) -> Z2 []
            If if(C) -> R [then_branch=<graph>, else_branch=<graph>]
              then_branch: outputs ["T3"]
                Mul i3/sq(Z2, Z2) -> i3/s []
                LeakyRelu i3/lr(i3/s) -> i3/l [alpha=0.25]
                Elu i3/elu(i3/l) -> T3 [alpha=4]
              else_branch: outputs ["E"]
                Identity id(Z2) -> E []
        "#]]
        .assert_eq(&text);
        // Resolved attributes carry no reference any more.
        let g = m.graph.as_ref().unwrap();
        assert!(g
            .node
            .iter()
            .flat_map(|n| &n.attribute)
            .all(|a| a.ref_attr_name.is_none()));
        assert_eq!(m.opset_import, vec![opset("", 18), opset("local", 1)]);
    }

    #[test]
    fn fresh_names_avoid_existing_ones_and_repeated_call_names() {
        let mut m = test_model();
        let g = m.graph.as_mut().unwrap();
        // A graph value already named like a generated one, and a second call node named "o1".
        g.input.push(vi("o1/t"));
        g.node
            .insert(2, node("o1", "Inner", "local", &["Z2"], &["Q"], vec![]));
        inline_functions(&mut m).unwrap();
        let g = m.graph.as_ref().unwrap();
        let outs: Vec<&str> = g
            .node
            .iter()
            .flat_map(|n| n.output.iter().map(|s| s.as_str()))
            .collect();
        assert!(outs.contains(&"o1/t_2"), "{outs:?}");
        assert!(outs.contains(&"o1_2/s"), "{outs:?}");
        let mut seen = BTreeSet::new();
        for o in outs {
            assert!(seen.insert(o), "value {o} produced twice");
        }
    }

    #[test]
    fn subgraphs_inside_function_bodies_are_renamed() {
        // F(c, v) -> r: r = If(c) { then: u = Neg(v) -> u } else { Identity(v) -> k }
        let then_b = GraphProto {
            node: vec![node("neg", "Neg", "", &["v"], &["u"], vec![])],
            output: vec![vi("u")],
            ..Default::default()
        };
        let else_b = GraphProto {
            node: vec![node("cp", "Identity", "", &["v"], &["k"], vec![])],
            output: vec![vi("k")],
            ..Default::default()
        };
        let f = function(
            "F",
            &["c", "v"],
            &["r"],
            &[],
            vec![],
            vec![node(
                "if",
                "If",
                "",
                &["c"],
                &["r"],
                vec![attr_g("then_branch", then_b), attr_g("else_branch", else_b)],
            )],
        );
        let mut m = ModelProto {
            opset_import: vec![opset("", 18)],
            graph: Some(GraphProto {
                node: vec![node("call", "F", "local", &["C", "V"], &["R"], vec![])],
                ..Default::default()
            }),
            functions: vec![f],
            ..Default::default()
        };
        inline_functions(&mut m).unwrap();
        let mut text = String::new();
        dump_graph(m.graph.as_ref().unwrap(), 0, &mut text);
        expect_test::expect![[r#"
            If call/if(C) -> R [then_branch=<graph>, else_branch=<graph>]
              then_branch: outputs ["call/u"]
                Neg call/neg(V) -> call/u []
              else_branch: outputs ["call/k"]
                Identity call/cp(V) -> call/k []
        "#]]
        .assert_eq(&text);
        // The function's opset imports were merged (here already present).
        assert_eq!(m.opset_import, vec![opset("", 18)]);
    }

    #[test]
    fn recursion_is_an_error_naming_the_chain() {
        let a = function(
            "A",
            &["x"],
            &["y"],
            &[],
            vec![],
            vec![node("n", "B", "local", &["x"], &["y"], vec![])],
        );
        let b = function(
            "B",
            &["x"],
            &["y"],
            &[],
            vec![],
            vec![node("n", "A", "local", &["x"], &["y"], vec![])],
        );
        let mut m = ModelProto {
            graph: Some(GraphProto {
                node: vec![node("c", "A", "local", &["X"], &["Y"], vec![])],
                ..Default::default()
            }),
            functions: vec![a, b],
            ..Default::default()
        };
        let e = inline_functions(&mut m).unwrap_err();
        assert_eq!(
            e.to_string(),
            "function 'local:A': recursive call chain local:A -> local:B -> local:A"
        );
        // The model keeps its functions when inlining fails.
        assert_eq!(m.functions.len(), 2);
    }

    #[test]
    fn malformed_functions_are_errors() {
        let undefined = function(
            "U",
            &["x"],
            &["y"],
            &[],
            vec![],
            vec![node("n", "Add", "", &["x", "ghost"], &["y"], vec![])],
        );
        let mut m = ModelProto {
            graph: Some(GraphProto {
                node: vec![node("c", "U", "local", &["X"], &["Y"], vec![])],
                ..Default::default()
            }),
            functions: vec![undefined],
            ..Default::default()
        };
        assert_eq!(
            inline_functions(&mut m).unwrap_err().to_string(),
            "function 'local:U': node 'n' uses 'ghost', which is neither a function input nor defined in the body"
        );

        let mut f = function(
            "V",
            &["x"],
            &["y"],
            &[],
            vec![],
            vec![node("n", "Neg", "", &["x"], &["y"], vec![])],
        );
        f.opset_import = vec![opset("", 17)];
        let mut m = ModelProto {
            opset_import: vec![opset("", 18)],
            graph: Some(GraphProto {
                node: vec![node("c", "V", "local", &["X"], &["Y"], vec![])],
                ..Default::default()
            }),
            functions: vec![f],
            ..Default::default()
        };
        assert_eq!(
            inline_functions(&mut m).unwrap_err().to_string(),
            "function 'local:V': imports opset '' version 17 but the model imports version 18"
        );

        let f = function(
            "W",
            &["x"],
            &["y"],
            &[],
            vec![],
            vec![node("n", "Neg", "", &["x"], &["y"], vec![])],
        );
        let mut m = ModelProto {
            graph: Some(GraphProto {
                node: vec![node("c", "W", "local", &["X", "X2"], &["Y"], vec![])],
                ..Default::default()
            }),
            functions: vec![f],
            ..Default::default()
        };
        assert_eq!(
            inline_functions(&mut m).unwrap_err().to_string(),
            "function 'local:W': node 'c' passes 2 inputs and 1 outputs, the function declares 1 and 1"
        );
    }
}
