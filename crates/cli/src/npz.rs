//! `.npy` and `.npz` files: numpy's array format, and zip archives of `.npy` files (stored or
//! deflated, zip64 sizes understood), read and written without numpy.
//!
//! Arrays are C-order little-endian with a numpy dtype (`<f4`, `<i8`, `|b1`, ...); Fortran order and
//! big-endian data are refused with a clear error. Writing is atomic (temporary file + rename).

use std::io::Write;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use memplan_ir::DataType;

/// One array: name (the key without `.npy`), element type, shape and little-endian bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub data: Bytes,
}

fn descr_of(d: DataType) -> Option<&'static str> {
    Some(match d {
        DataType::F32 => "<f4",
        DataType::F64 => "<f8",
        DataType::F16 => "<f2",
        DataType::I64 => "<i8",
        DataType::I32 => "<i4",
        DataType::I16 => "<i2",
        DataType::I8 => "|i1",
        DataType::U8 => "|u1",
        DataType::U16 => "<u2",
        DataType::U32 => "<u4",
        DataType::U64 => "<u8",
        DataType::Bool => "|b1",
        // numpy has no bfloat16; ml_dtypes writes it as 2-byte void, read back as `<V2`.
        DataType::BF16 => "<V2",
        _ => return None,
    })
}

fn dtype_of(descr: &str) -> Option<DataType> {
    let d = descr.replace('=', "<");
    Some(match d.as_str() {
        "<f4" => DataType::F32,
        "<f8" => DataType::F64,
        "<f2" => DataType::F16,
        "<i8" => DataType::I64,
        "<i4" => DataType::I32,
        "<i2" => DataType::I16,
        "|i1" | "<i1" => DataType::I8,
        "|u1" | "<u1" => DataType::U8,
        "<u2" => DataType::U16,
        "<u4" => DataType::U32,
        "<u8" => DataType::U64,
        "|b1" | "<b1" => DataType::Bool,
        "<V2" | "|V2" => DataType::BF16,
        _ => return None,
    })
}

/// Parses one `.npy` payload; `name` labels errors.
pub fn parse_npy(name: &str, bytes: Bytes) -> Result<Array> {
    let err = |m: String| anyhow!("array '{name}': {m}");
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(err("not a .npy array (bad magic)".into()));
    }
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(err(format!("unsupported .npy version {v}"))),
    };
    let header = bytes
        .get(start..start + hlen)
        .ok_or_else(|| err("truncated header".into()))?;
    let header = std::str::from_utf8(header).map_err(|_| err("header is not text".into()))?;
    let field = |key: &str| -> Result<&str> {
        let at = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| err(format!("header has no '{key}'")))?;
        let rest = &header[at + key.len() + 2..];
        let rest = rest
            .trim_start()
            .strip_prefix(':')
            .ok_or_else(|| err(format!("bad '{key}' entry")))?;
        Ok(rest.trim_start())
    };
    let descr = field("descr")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|s| s.split('\'').next())
        .ok_or_else(|| err("bad descr".into()))?;
    let dtype = dtype_of(descr).ok_or_else(|| err(format!("dtype '{descr}' is not supported")))?;
    if field("fortran_order")?.starts_with("True") {
        return Err(err(
            "Fortran-order arrays are not supported; save a C-order copy".into(),
        ));
    }
    let shape_txt = field("shape")?;
    let shape_txt = shape_txt
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| err("bad shape".into()))?;
    let shape: Vec<usize> = shape_txt
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| err(format!("bad shape entry '{s}'")))
        })
        .collect::<Result<_>>()?;
    let width = (dtype.bits() / 8) as usize;
    let n = shape
        .iter()
        .try_fold(width, |a, &d| a.checked_mul(d))
        .ok_or_else(|| err("shape overflows".into()))?;
    let data = bytes.slice(start + hlen..);
    if data.len() != n {
        return Err(err(format!(
            "shape {shape:?} of {descr} needs {n} bytes, the file has {}",
            data.len()
        )));
    }
    Ok(Array {
        name: name.to_string(),
        dtype,
        shape,
        data,
    })
}

/// The `.npy` encoding of an array.
pub fn encode_npy(a: &Array) -> Result<Vec<u8>> {
    let descr = descr_of(a.dtype)
        .ok_or_else(|| anyhow!("array '{}': type {} has no numpy dtype", a.name, a.dtype))?;
    let shape = match a.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", a.shape[0]),
        _ => format!(
            "({})",
            a.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let total = 10 + header.len() + 1;
    header.push_str(&" ".repeat((64 - total % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + a.data.len());
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&a.data);
    Ok(out)
}

/// Reads a `.npy` file (one array named after the file stem) or a `.npz` archive.
pub fn read(path: &Path) -> Result<Vec<Array>> {
    let bytes = Bytes::from(
        std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?,
    );
    let ctx = || format!("{}", path.display());
    if bytes.starts_with(b"\x93NUMPY") {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        return Ok(vec![parse_npy(&stem, bytes).with_context(ctx)?]);
    }
    if !bytes.starts_with(b"PK") {
        bail!("{}: neither a .npy nor a .npz file", path.display());
    }
    read_zip(&bytes).with_context(ctx)
}

fn u16_at(b: &[u8], i: usize) -> Result<u16> {
    b.get(i..i + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or_else(|| anyhow!("truncated zip"))
}
fn u32_at(b: &[u8], i: usize) -> Result<u32> {
    b.get(i..i + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or_else(|| anyhow!("truncated zip"))
}
fn u64_at(b: &[u8], i: usize) -> Result<u64> {
    Ok(u32_at(b, i)? as u64 | (u32_at(b, i + 4)? as u64) << 32)
}

fn read_zip(b: &Bytes) -> Result<Vec<Array>> {
    // End of central directory: the last PK\x05\x06 within the trailing 64 KiB comment window.
    let lo = b.len().saturating_sub(22 + 65535);
    let eocd = (lo..b.len().saturating_sub(21))
        .rev()
        .find(|&i| b[i..i + 4] == [0x50, 0x4b, 0x05, 0x06])
        .ok_or_else(|| anyhow!("not a zip archive (no end of central directory)"))?;
    let mut count = u16_at(b, eocd + 10)? as u64;
    let mut cd = u32_at(b, eocd + 16)? as u64;
    // Zip64 end of central directory locator just before the EOCD.
    if eocd >= 20 && b[eocd - 20..eocd - 16] == [0x50, 0x4b, 0x06, 0x07] {
        let z64 = u64_at(b, eocd - 12)? as usize;
        if b.get(z64..z64 + 4) == Some(&[0x50, 0x4b, 0x06, 0x06][..]) {
            count = u64_at(b, z64 + 32)?;
            cd = u64_at(b, z64 + 48)?;
        }
    }
    let mut out = Vec::new();
    let mut p = cd as usize;
    for _ in 0..count {
        if u32_at(b, p)? != 0x0201_4b50 {
            bail!("corrupt zip central directory");
        }
        let method = u16_at(b, p + 10)?;
        let mut csize = u32_at(b, p + 20)? as u64;
        let mut usize_ = u32_at(b, p + 24)? as u64;
        let nlen = u16_at(b, p + 28)? as usize;
        let xlen = u16_at(b, p + 30)? as usize;
        let clen = u16_at(b, p + 32)? as usize;
        let mut local = u32_at(b, p + 42)? as u64;
        let name = String::from_utf8_lossy(
            b.get(p + 46..p + 46 + nlen)
                .ok_or_else(|| anyhow!("truncated zip"))?,
        )
        .into_owned();
        // Zip64 extended information: the 0xFFFFFFFF fields, in order, from extra field 0x0001.
        let mut x = p + 46 + nlen;
        let xend = x + xlen;
        while x + 4 <= xend {
            let (id, len) = (u16_at(b, x)?, u16_at(b, x + 2)? as usize);
            if id == 1 {
                let mut q = x + 4;
                for f in [&mut usize_, &mut csize, &mut local] {
                    if *f == 0xFFFF_FFFF {
                        *f = u64_at(b, q)?;
                        q += 8;
                    }
                }
            }
            x += 4 + len;
        }
        p = xend + clen;
        let l = local as usize;
        if u32_at(b, l)? != 0x0403_4b50 {
            bail!("entry '{name}': corrupt local header");
        }
        let start = l + 30 + u16_at(b, l + 26)? as usize + u16_at(b, l + 28)? as usize;
        let end = start
            .checked_add(csize as usize)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| anyhow!("entry '{name}' is truncated"))?;
        let data = match method {
            0 => b.slice(start..end),
            8 => Bytes::from(
                miniz_oxide::inflate::decompress_to_vec_with_limit(&b[start..end], usize_ as usize)
                    .map_err(|e| anyhow!("entry '{name}': bad deflate data: {e:?}"))?,
            ),
            m => bail!("entry '{name}': zip compression method {m} is not supported"),
        };
        let key = name.strip_suffix(".npy").unwrap_or(&name);
        out.push(parse_npy(key, data)?);
    }
    Ok(out)
}

fn crc32(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let t = TABLE.get_or_init(|| {
        let mut t = [0u32; 256];
        for (i, e) in t.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
            *e = c;
        }
        t
    });
    !data.iter().fold(!0u32, |c, &x| {
        t[((c ^ x as u32) & 0xff) as usize] ^ (c >> 8)
    })
}

/// Writes arrays as an uncompressed `.npz` (what `np.savez` writes), atomically.
pub fn write_npz(path: &Path, arrays: &[Array]) -> Result<()> {
    let mut body: Vec<u8> = Vec::new();
    let mut central: Vec<u8> = Vec::new();
    for a in arrays {
        let npy = encode_npy(a)?;
        let name = format!("{}.npy", a.name);
        if npy.len() as u64 >= 0xFFFF_FFFF || body.len() as u64 >= 0xFFFF_FFFF {
            bail!(
                "array '{}': over 4 GiB; .npz output is limited to 4 GiB per archive here",
                a.name
            );
        }
        let (crc, size, off) = (crc32(&npy), npy.len() as u32, body.len() as u32);
        let header = |sig: u32, central: bool| {
            let mut h = Vec::new();
            h.extend_from_slice(&sig.to_le_bytes());
            if central {
                h.extend_from_slice(&20u16.to_le_bytes()); // made by
            }
            for v in [20u16, 0, 0, 0, 0x21] {
                h.extend_from_slice(&v.to_le_bytes()); // version, flags, method, time, date
            }
            for v in [crc, size, size] {
                h.extend_from_slice(&v.to_le_bytes());
            }
            h.extend_from_slice(&(name.len() as u16).to_le_bytes());
            h.extend_from_slice(&0u16.to_le_bytes()); // extra
            if central {
                for v in [0u16, 0, 0] {
                    h.extend_from_slice(&v.to_le_bytes()); // comment, disk, internal attrs
                }
                h.extend_from_slice(&0u32.to_le_bytes()); // external attrs
                h.extend_from_slice(&off.to_le_bytes());
            }
            h.extend_from_slice(name.as_bytes());
            h
        };
        body.extend_from_slice(&header(0x0403_4b50, false));
        body.extend_from_slice(&npy);
        central.extend_from_slice(&header(0x0201_4b50, true));
    }
    let cd_off = body.len() as u32;
    let n = arrays.len() as u16;
    body.extend_from_slice(&central);
    body.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, n, n] {
        body.extend_from_slice(&v.to_le_bytes());
    }
    body.extend_from_slice(&(central.len() as u32).to_le_bytes());
    body.extend_from_slice(&cd_off.to_le_bytes());
    body.extend_from_slice(&0u16.to_le_bytes());
    memplan_onnx::write_atomic(path, |w| w.write_all(&body)).map_err(|e| anyhow!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn npz_round_trip_and_corpus_file() {
        let arrays = vec![
            Array {
                name: "x".into(),
                dtype: DataType::F32,
                shape: vec![2, 3],
                data: Bytes::from((0..24u8).collect::<Vec<_>>()),
            },
            Array {
                name: "m".into(),
                dtype: DataType::Bool,
                shape: vec![],
                data: Bytes::from_static(&[1]),
            },
            Array {
                name: "i".into(),
                dtype: DataType::I64,
                shape: vec![1],
                data: Bytes::from(7i64.to_le_bytes().to_vec()),
            },
        ];
        let p = std::env::temp_dir().join(format!("memplan-npz-{}.npz", std::process::id()));
        write_npz(&p, &arrays).unwrap();
        let back = read(&p).unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(back, arrays);

        let corpus = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/corpus/inputs/bert_encoder_40.npz");
        let a = read(&corpus).unwrap();
        let names: Vec<&str> = a.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["input_ids", "attention_mask"]);
        assert_eq!(a[0].shape, [2, 40]);
        assert_eq!(a[0].dtype, DataType::I64);
    }

    #[test]
    fn crc_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn bad_arrays_are_named() {
        let e = parse_npy(
            "a",
            Bytes::from_static(b"\x93NUMPY\x01\x00\x10\x00{'descr': '<c8'}"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("array 'a'"), "{e}");
        let e = parse_npy("b", Bytes::from_static(b"garbage!!!!")).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
    }
}
