//! Reading and writing `.npy` files (format versions 1, 2 and 3; little-endian or byte-order-free element types;
//! C order). Anything else is refused with a message naming the file; nothing is converted silently.

use std::path::Path;

use crate::error::{Result, RuntimeError};
use crate::tensor::{DType, HostTensor};

const MAGIC: &[u8] = b"\x93NUMPY";

/// Reads `path` as the tensor `name`. When `expected` is given, the file must hold that dtype; bf16, which numpy
/// has no native code for, is read from files of 2-byte raw elements (`<u2`, `<i2`, `|V2`) holding its bits.
pub fn read_npy(path: &Path, name: &str, expected: Option<DType>) -> Result<HostTensor> {
    let bytes = std::fs::read(path).map_err(|source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_npy(&bytes, name, expected).map_err(|message| RuntimeError::Npy {
        path: path.to_path_buf(),
        message,
    })
}

/// Writes `tensor` as a version-1 `.npy` file. bf16 is written as `<u2` bits.
pub fn write_npy(path: &Path, tensor: &HostTensor) -> Result<()> {
    std::fs::write(path, encode_npy(tensor)).map_err(|source| RuntimeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

pub fn encode_npy(tensor: &HostTensor) -> Vec<u8> {
    let shape = match tensor.shape.len() {
        0 => "()".to_string(),
        1 => format!("({},)", tensor.shape[0]),
        _ => format!(
            "({})",
            tensor
                .shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr_of(tensor.dtype)
    );
    // Pad so that magic + version + length + header is a multiple of 64, ending in '\n'.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + tensor.data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[1, 0]);
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(&tensor.data);
    out
}

fn descr_of(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::F16 => "<f2",
        DType::BF16 => "<u2",
        DType::I64 => "<i8",
        DType::I32 => "<i4",
        DType::I16 => "<i2",
        DType::I8 => "|i1",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::Bool => "|b1",
    }
}

fn parse_npy(
    bytes: &[u8],
    name: &str,
    expected: Option<DType>,
) -> std::result::Result<HostTensor, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not a .npy file (missing \\x93NUMPY magic)".to_string());
    }
    let major = bytes[6];
    let (header_len, start) = match major {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 => {
            if bytes.len() < 12 {
                return Err("truncated header".to_string());
            }
            (
                u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
                12,
            )
        }
        v => return Err(format!("unsupported .npy format version {v}")),
    };
    let header = bytes
        .get(start..start + header_len)
        .ok_or("truncated header")?;
    let header = std::str::from_utf8(header).map_err(|_| "header is not UTF-8".to_string())?;
    let descr = dict_value(header, "descr").ok_or("header has no 'descr'")?;
    let descr = descr.trim_matches(|c| c == '\'' || c == '"');
    let fortran = dict_value(header, "fortran_order").ok_or("header has no 'fortran_order'")?;
    if fortran.trim() != "False" {
        return Err(
            "Fortran-order arrays are not supported; save with np.ascontiguousarray(a)".to_string(),
        );
    }
    let shape_text = dict_value(header, "shape").ok_or("header has no 'shape'")?;
    let shape = parse_shape(shape_text)?;
    let file_dtype = dtype_of(descr, expected)?;
    if let Some(want) = expected {
        if want != file_dtype {
            return Err(format!("holds {file_dtype} ('{descr}') but `{name}` is {want}; convert it with numpy first"));
        }
    }
    let data = &bytes[start + header_len..];
    let t = HostTensor::from_bytes(name, file_dtype, shape, data.to_vec())
        .map_err(|e| e.to_string())?;
    Ok(t)
}

fn dtype_of(descr: &str, expected: Option<DType>) -> std::result::Result<DType, String> {
    if descr.starts_with('>') && !descr.ends_with('1') {
        return Err(format!("big-endian element type '{descr}' is not supported; save with a.astype(a.dtype.newbyteorder('<'))"));
    }
    let code = descr.trim_start_matches(['<', '|', '=']);
    if expected == Some(DType::BF16) && matches!(code, "u2" | "i2" | "V2") {
        return Ok(DType::BF16);
    }
    Ok(match code {
        "f4" => DType::F32,
        "f8" => DType::F64,
        "f2" => DType::F16,
        "i8" => DType::I64,
        "i4" => DType::I32,
        "i2" => DType::I16,
        "i1" => DType::I8,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "b1" => DType::Bool,
        _ => return Err(format!("unsupported element type '{descr}'")),
    })
}

/// The text after `'key':` up to the next top-level comma (a tuple counts as one value).
fn dict_value<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let pat_single = format!("'{key}'");
    let pat_double = format!("\"{key}\"");
    let at = header
        .find(&pat_single)
        .or_else(|| header.find(&pat_double))?;
    let rest = &header[at + key.len() + 2..];
    let rest = rest.trim_start().strip_prefix(':')?.trim_start();
    let mut depth = 0i32;
    for (i, c) in rest.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' | '}' if depth == 0 => return Some(rest[..i].trim()),
            _ => {}
        }
    }
    None
}

fn parse_shape(text: &str) -> std::result::Result<Vec<usize>, String> {
    let inner = text
        .trim()
        .strip_prefix('(')
        .and_then(|t| t.strip_suffix(')'))
        .ok_or_else(|| format!("malformed shape `{text}`"))?;
    inner
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.trim_end_matches('L')
                .parse::<usize>()
                .map_err(|_| format!("malformed shape `{text}`"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_every_dtype() {
        for dtype in DType::ALL {
            let t = HostTensor::from_bytes(
                "t",
                dtype,
                vec![2, 3],
                (0..6 * dtype.size() as u8).collect(),
            )
            .unwrap();
            let back = parse_npy(&encode_npy(&t), "t", Some(dtype)).unwrap();
            assert_eq!(back, t, "{dtype}");
        }
    }

    #[test]
    fn reads_scalars_and_version_2() {
        let t = HostTensor::from_values("s", vec![], &[1.5f32]).unwrap();
        assert_eq!(parse_npy(&encode_npy(&t), "s", None).unwrap(), t);

        let header = "{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }\n";
        let mut v2 = b"\x93NUMPY\x02\x00".to_vec();
        v2.extend_from_slice(&(header.len() as u32).to_le_bytes());
        v2.extend_from_slice(header.as_bytes());
        v2.extend_from_slice(&7i64.to_le_bytes());
        v2.extend_from_slice(&(-1i64).to_le_bytes());
        let t = parse_npy(&v2, "ids", Some(DType::I64)).unwrap();
        assert_eq!(t.shape, vec![2]);
        assert_eq!(t.to_f64_vec(), vec![7.0, -1.0]);
    }

    #[test]
    fn refuses_what_it_cannot_read_faithfully() {
        let t = HostTensor::from_values("x", vec![2], &[1.0f64, 2.0]).unwrap();
        let err = parse_npy(&encode_npy(&t), "x", Some(DType::F32)).unwrap_err();
        assert!(
            err.contains("holds f64") && err.contains("`x` is f32"),
            "{err}"
        );
        let mut big = encode_npy(&t);
        let at = big.windows(4).position(|w| w == b"'<f8").unwrap();
        big[at + 1] = b'>';
        assert!(parse_npy(&big, "x", None)
            .unwrap_err()
            .contains("big-endian"));
    }
}
