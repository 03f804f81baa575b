//! Element types: every ONNX tensor element type, with its byte width.

use std::fmt;

/// An ONNX tensor element type. Discriminants are the `TensorProto.DataType` codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[repr(i32)]
pub enum DataType {
    F32 = 1,
    U8 = 2,
    I8 = 3,
    U16 = 4,
    I16 = 5,
    I32 = 6,
    I64 = 7,
    String = 8,
    Bool = 9,
    F16 = 10,
    F64 = 11,
    U32 = 12,
    U64 = 13,
    Complex64 = 14,
    Complex128 = 15,
    BF16 = 16,
    F8E4M3FN = 17,
    F8E4M3FNUZ = 18,
    F8E5M2 = 19,
    F8E5M2FNUZ = 20,
    U4 = 21,
    I4 = 22,
    F4E2M1 = 23,
    F8E8M0 = 24,
    U2 = 25,
    I2 = 26,
}

impl DataType {
    /// Every element type, in code order.
    pub const ALL: [DataType; 26] = [
        DataType::F32,
        DataType::U8,
        DataType::I8,
        DataType::U16,
        DataType::I16,
        DataType::I32,
        DataType::I64,
        DataType::String,
        DataType::Bool,
        DataType::F16,
        DataType::F64,
        DataType::U32,
        DataType::U64,
        DataType::Complex64,
        DataType::Complex128,
        DataType::BF16,
        DataType::F8E4M3FN,
        DataType::F8E4M3FNUZ,
        DataType::F8E5M2,
        DataType::F8E5M2FNUZ,
        DataType::U4,
        DataType::I4,
        DataType::F4E2M1,
        DataType::F8E8M0,
        DataType::U2,
        DataType::I2,
    ];

    /// The type for an ONNX `TensorProto.DataType` code; `None` for 0 (UNDEFINED) and unknown codes.
    pub fn from_onnx(code: i32) -> Option<DataType> {
        DataType::ALL.iter().copied().find(|d| *d as i32 == code)
    }

    /// The type INT attribute `name` names by its code, or the line saying it names none (0,
    /// UNDEFINED, among them): the one rule of `ir`'s `InferCtx::attr_dtype` and `exec`'s
    /// `OpCtx::dtype`.
    pub fn from_attr(name: &str, code: i64) -> Result<DataType, String> {
        i32::try_from(code)
            .ok()
            .and_then(DataType::from_onnx)
            .ok_or_else(|| format!("attribute '{name}' is {code}, not a data type"))
    }

    /// The ONNX `TensorProto.DataType` code.
    pub fn onnx_code(self) -> i32 {
        self as i32
    }

    /// Bits per element. Strings have no fixed width and report the width of one pointer-sized handle.
    pub fn bits(self) -> u32 {
        use DataType::*;
        match self {
            U2 | I2 => 2,
            U4 | I4 | F4E2M1 => 4,
            U8 | I8 | Bool | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F8E8M0 => 8,
            U16 | I16 | F16 | BF16 => 16,
            F32 | I32 | U32 => 32,
            F64 | I64 | U64 | Complex64 | String => 64,
            Complex128 => 128,
        }
    }

    /// Bytes taken by `n` packed elements (sub-byte types round up to whole bytes).
    pub fn bytes_for(self, n: u64) -> u64 {
        (n.saturating_mul(self.bits() as u64)).div_ceil(8)
    }

    pub fn is_float(self) -> bool {
        use DataType::*;
        matches!(
            self,
            F32 | F64 | F16 | BF16 | F8E4M3FN | F8E4M3FNUZ | F8E5M2 | F8E5M2FNUZ | F4E2M1 | F8E8M0
        )
    }

    pub fn is_int(self) -> bool {
        use DataType::*;
        matches!(
            self,
            U8 | I8 | U16 | I16 | I32 | I64 | U32 | U64 | U4 | I4 | U2 | I2
        )
    }

    /// The ONNX spelling used in specs and by onnx.helper (`float`, `int64`, `bool`, ...).
    pub fn onnx_name(self) -> &'static str {
        use DataType::*;
        match self {
            F32 => "float",
            U8 => "uint8",
            I8 => "int8",
            U16 => "uint16",
            I16 => "int16",
            I32 => "int32",
            I64 => "int64",
            String => "string",
            Bool => "bool",
            F16 => "float16",
            F64 => "double",
            U32 => "uint32",
            U64 => "uint64",
            Complex64 => "complex64",
            Complex128 => "complex128",
            BF16 => "bfloat16",
            F8E4M3FN => "float8e4m3fn",
            F8E4M3FNUZ => "float8e4m3fnuz",
            F8E5M2 => "float8e5m2",
            F8E5M2FNUZ => "float8e5m2fnuz",
            U4 => "uint4",
            I4 => "int4",
            F4E2M1 => "float4e2m1",
            F8E8M0 => "float8e8m0",
            U2 => "uint2",
            I2 => "int2",
        }
    }

    /// Parses the ONNX spelling (`float`, `int64`, ...) or the short one (`f32`, `i64`, ...).
    pub fn parse(s: &str) -> Option<DataType> {
        let short = match s {
            "f32" => Some(DataType::F32),
            "f64" => Some(DataType::F64),
            "f16" => Some(DataType::F16),
            "bf16" => Some(DataType::BF16),
            "i64" => Some(DataType::I64),
            "i32" => Some(DataType::I32),
            "i16" => Some(DataType::I16),
            "i8" => Some(DataType::I8),
            "u8" => Some(DataType::U8),
            "u16" => Some(DataType::U16),
            "u32" => Some(DataType::U32),
            "u64" => Some(DataType::U64),
            _ => None,
        };
        short.or_else(|| DataType::ALL.iter().copied().find(|d| d.onnx_name() == s))
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.onnx_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_onnx(d.onnx_code()), Some(d));
            assert_eq!(DataType::parse(d.onnx_name()), Some(d));
        }
        assert_eq!(DataType::from_onnx(0), None);
        assert_eq!(DataType::from_onnx(99), None);
    }

    #[test]
    fn sub_byte_sizes_round_up() {
        assert_eq!(DataType::I4.bytes_for(3), 2);
        assert_eq!(DataType::U2.bytes_for(5), 2);
        assert_eq!(DataType::F32.bytes_for(3), 12);
        assert_eq!(DataType::Bool.bytes_for(7), 7);
    }
}
