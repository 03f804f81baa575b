//! Tensors across the boundary without copies: an input is a `Bytes` over the caller's buffer
//! (held, and released with the GIL, when the tensor is dropped); an output is an `OutputBuffer`
//! exporting the executor's bytes through the buffer protocol (read-only), which numpy wraps.

use std::ffi::{c_int, c_void, CStr};

use anyhow::anyhow;
use bytes::Bytes;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyBufferError;
use pyo3::ffi;
use pyo3::prelude::*;

use memplan_exec::Tensor;
use memplan_ir::DataType;

/// A caller's contiguous byte buffer as the owner of a `Bytes`.
struct HeldBuffer(PyBuffer<u8>);

impl AsRef<[u8]> for HeldBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the buffer is C-contiguous bytes (checked when it was taken) and stays valid
        // while `self.0` holds the export; nothing writes it through this handle.
        unsafe { std::slice::from_raw_parts(self.0.buf_ptr() as *const u8, self.0.len_bytes()) }
    }
}

/// An input tensor over the bytes of `buf` (any object exporting a C-contiguous buffer), typed
/// `dtype` (ONNX spelling) with `shape`.
pub fn input_tensor(
    name: &str,
    dtype: &str,
    shape: &[usize],
    buf: &Bound<'_, PyAny>,
) -> anyhow::Result<Tensor> {
    let dt = DataType::parse(dtype)
        .ok_or_else(|| anyhow!("input '{name}': unknown element type '{dtype}'"))?;
    let pb = PyBuffer::<u8>::get(buf).map_err(|e| anyhow!("input '{name}': {e}"))?;
    if !pb.is_c_contiguous() {
        return Err(anyhow!("input '{name}': the buffer is not C-contiguous"));
    }
    let bytes = Bytes::from_owner(HeldBuffer(pb));
    Tensor::from_bytes(dt, shape, bytes, None).map_err(|e| anyhow!("input '{name}': {e}"))
}

/// The bytes of an output tensor, exported read-only through the buffer protocol (format `B`, one
/// dimension); `numpy.frombuffer` views them without a copy. A planned run's outputs share its arena,
/// which stays alive while any of them does.
#[pyclass(module = "memplan._memplan", frozen)]
pub struct OutputBuffer {
    tensor: Tensor,
}

impl OutputBuffer {
    pub fn new(tensor: Tensor) -> OutputBuffer {
        OutputBuffer { tensor }
    }
}

static FORMAT_B: &CStr = c"B";

#[pymethods]
impl OutputBuffer {
    fn __len__(&self) -> usize {
        self.tensor.bytes().len()
    }

    /// Exports the bytes read-only; a writable request is refused.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        if flags & ffi::PyBUF_WRITABLE == ffi::PyBUF_WRITABLE {
            return Err(PyBufferError::new_err("memplan outputs are read-only"));
        }
        let bytes = slf.get().tensor.bytes();
        // SAFETY: `view` is the non-null buffer struct Python passes to fill; the pointer stays valid
        // while `obj` (a strong reference to this frozen object, holding the tensor) is alive.
        unsafe {
            (*view).obj = slf.clone().into_any().into_ptr();
            (*view).buf = bytes.as_ptr() as *mut c_void;
            (*view).len = bytes.len() as ffi::Py_ssize_t;
            (*view).readonly = 1;
            (*view).itemsize = 1;
            (*view).format = if flags & ffi::PyBUF_FORMAT == ffi::PyBUF_FORMAT {
                FORMAT_B.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & ffi::PyBUF_ND == ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & ffi::PyBUF_STRIDES == ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}
}
