//! Element types of ONNX tensors (TensorProto.DataType, IR versions up to 11).

use std::fmt;

/// An ONNX element type.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    U8,
    I8,
    U16,
    I16,
    I32,
    I64,
    String,
    Bool,
    F16,
    F64,
    U32,
    U64,
    C64,
    C128,
    BF16,
    F8E4M3FN,
    F8E4M3FNUZ,
    F8E5M2,
    F8E5M2FNUZ,
    U4,
    I4,
    F4E2M1,
}

impl DType {
    /// Every type, in wire-code order.
    pub const ALL: [DType; 23] = [
        DType::F32,
        DType::U8,
        DType::I8,
        DType::U16,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::String,
        DType::Bool,
        DType::F16,
        DType::F64,
        DType::U32,
        DType::U64,
        DType::C64,
        DType::C128,
        DType::BF16,
        DType::F8E4M3FN,
        DType::F8E4M3FNUZ,
        DType::F8E5M2,
        DType::F8E5M2FNUZ,
        DType::U4,
        DType::I4,
        DType::F4E2M1,
    ];

    /// From the wire code; `None` for 0 (UNDEFINED) and codes this schema does not know.
    pub fn from_code(code: i32) -> Option<DType> {
        if code >= 1 && (code as usize) <= Self::ALL.len() {
            Some(Self::ALL[code as usize - 1])
        } else {
            None
        }
    }

    /// The wire code.
    pub fn code(self) -> i32 {
        Self::ALL
            .iter()
            .position(|&d| d == self)
            .map_or(0, |p| p as i32 + 1)
    }

    /// Storage bits per element (strings count as a pointer-sized handle, as ORT stores them).
    pub fn bits(self) -> u64 {
        match self {
            DType::U4 | DType::I4 | DType::F4E2M1 => 4,
            DType::U8
            | DType::I8
            | DType::Bool
            | DType::F8E4M3FN
            | DType::F8E4M3FNUZ
            | DType::F8E5M2
            | DType::F8E5M2FNUZ => 8,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 16,
            DType::F32 | DType::I32 | DType::U32 => 32,
            DType::F64 | DType::I64 | DType::U64 | DType::C64 | DType::String => 64,
            DType::C128 => 128,
        }
    }

    /// True for floating-point types (including 8- and 4-bit floats).
    pub fn is_float(self) -> bool {
        matches!(
            self,
            DType::F32
                | DType::F16
                | DType::BF16
                | DType::F64
                | DType::F8E4M3FN
                | DType::F8E4M3FNUZ
                | DType::F8E5M2
                | DType::F8E5M2FNUZ
                | DType::F4E2M1
        )
    }

    /// The short name used by the text form (`f32`, `i64`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::U8 => "u8",
            DType::I8 => "i8",
            DType::U16 => "u16",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::String => "str",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::F64 => "f64",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::BF16 => "bf16",
            DType::F8E4M3FN => "f8e4m3fn",
            DType::F8E4M3FNUZ => "f8e4m3fnuz",
            DType::F8E5M2 => "f8e5m2",
            DType::F8E5M2FNUZ => "f8e5m2fnuz",
            DType::U4 => "u4",
            DType::I4 => "i4",
            DType::F4E2M1 => "f4e2m1",
        }
    }

    /// Inverse of [`DType::name`].
    pub fn from_name(name: &str) -> Option<DType> {
        Self::ALL.iter().copied().find(|d| d.name() == name)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for d in DType::ALL {
            assert_eq!(DType::from_code(d.code()), Some(d));
            assert_eq!(DType::from_name(d.name()), Some(d));
        }
        assert_eq!(DType::from_code(0), None);
        assert_eq!(DType::from_code(24), None);
        assert_eq!(DType::F32.code(), 1);
        assert_eq!(DType::BF16.code(), 16);
        assert_eq!(DType::F4E2M1.code(), 23);
    }
}
