//! Reading a `ModelProto` from disk: memory-mapped, decoded without copying tensor bytes.

use std::fs::File;
use std::path::Path;

use bytes::Bytes;
use prost::Message;

use crate::error::OnnxError;
use crate::proto::ModelProto;

/// Maps a whole file read-only and returns its bytes as a shared `Bytes` that owns the mapping.
///
/// Contract: the file must not be modified while any slice of the result is alive (the mapping aliases
/// it). Writers in this crate never modify files in place: they write a temporary file and rename it,
/// which leaves a mapped inode untouched.
pub fn map_file(path: &Path) -> Result<Bytes, OnnxError> {
    let file = File::open(path).map_err(|e| OnnxError::io(path, "cannot open", e))?;
    let len = file
        .metadata()
        .map_err(|e| OnnxError::io(path, "cannot stat", e))?
        .len();
    if len == 0 {
        // Mapping zero bytes is an error on some platforms; an empty file has nothing to alias.
        return Ok(Bytes::new());
    }
    // SAFETY: the mapping is read-only, and this crate never writes to a file in place (see the
    // contract above); a concurrent external writer would break the contract, as for any mmap reader.
    let map =
        unsafe { memmap2::Mmap::map(&file) }.map_err(|e| OnnxError::io(path, "cannot mmap", e))?;
    Ok(Bytes::from_owner(map))
}

/// Loads an ONNX model: maps the file and decodes it.
///
/// `raw_data` (and every other protobuf `bytes` field) of the result are slices of the mapping, not
/// copies. Tensors stored as external data are left as references; resolve them with
/// [`crate::data::tensor_bytes`] or pull them in with [`crate::data::load_external_data`], relative to
/// the model's directory.
///
/// Errors: the file is missing or unreadable, the bytes are not a protobuf `ModelProto` (truncated or
/// another format), or the `ModelProto` has no graph.
pub fn load_model_proto(path: impl AsRef<Path>) -> Result<ModelProto, OnnxError> {
    let path = path.as_ref();
    let bytes = map_file(path)?;
    decode_model_proto(bytes, path)
}

/// Decodes a `ModelProto` from bytes; `path` only names the source in errors.
///
/// When `bytes` is a slice of a mapping, the decoded `bytes` fields share it (no copy).
pub fn decode_model_proto(bytes: Bytes, path: &Path) -> Result<ModelProto, OnnxError> {
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Decode {
        path: path.to_path_buf(),
        source: e,
    })?;
    if model.graph.is_none() {
        return Err(OnnxError::NoGraph {
            path: path.to_path_buf(),
        });
    }
    Ok(model)
}

/// The directory external-data locations of the model at `path` are relative to.
pub fn model_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{GraphProto, NodeProto, TensorProto};
    use crate::testutil::TempDir;

    fn tiny_model() -> ModelProto {
        ModelProto {
            ir_version: Some(10),
            graph: Some(GraphProto {
                name: Some("g".into()),
                node: vec![NodeProto {
                    op_type: Some("Relu".into()),
                    input: vec!["x".into()],
                    output: vec!["y".into()],
                    ..Default::default()
                }],
                initializer: vec![TensorProto {
                    name: Some("w".into()),
                    data_type: Some(1),
                    dims: vec![4],
                    raw_data: Some(Bytes::from(vec![7u8; 16])),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn missing_file_is_named() {
        let e = load_model_proto("/nonexistent/dir/m.onnx").unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.starts_with("/nonexistent/dir/m.onnx: cannot open:"),
            "{msg}"
        );
    }

    #[test]
    fn garbage_and_truncated_files_are_not_models() {
        let dir = TempDir::new("load_garbage");
        let p = dir.path().join("text.onnx");
        std::fs::write(&p, b"this is not a protobuf\n").unwrap();
        let msg = load_model_proto(&p).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("{}: not an ONNX model: ", p.display())),
            "{msg}"
        );

        let full = tiny_model().encode_to_vec();
        let p = dir.path().join("trunc.onnx");
        std::fs::write(&p, &full[..full.len() - 5]).unwrap();
        let msg = load_model_proto(&p).unwrap_err().to_string();
        assert!(msg.contains("not an ONNX model"), "{msg}");
    }

    #[test]
    fn model_without_graph_is_rejected() {
        let dir = TempDir::new("load_nograph");
        let p = dir.path().join("empty.onnx");
        std::fs::write(&p, b"").unwrap();
        let msg = load_model_proto(&p).unwrap_err().to_string();
        assert_eq!(
            msg,
            format!(
                "{}: not an ONNX model: ModelProto has no graph",
                p.display()
            )
        );
    }

    #[test]
    fn raw_data_aliases_the_mapping() {
        let dir = TempDir::new("load_alias");
        let p = dir.path().join("m.onnx");
        let m = tiny_model();
        std::fs::write(&p, m.encode_to_vec()).unwrap();
        let mapped = map_file(&p).unwrap();
        let loaded = decode_model_proto(mapped.clone(), &p).unwrap();
        assert_eq!(loaded, m);
        let raw = loaded.graph.as_ref().unwrap().initializer[0]
            .raw_data
            .as_ref()
            .unwrap();
        let range = mapped.as_ptr_range();
        assert!(
            range.contains(&raw.as_ptr()),
            "raw_data was copied out of the mapping"
        );
    }
}
