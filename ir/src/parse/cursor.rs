//! A cursor on one line of the text form and its tokens: spaces, words, numbers, strings,
//! tensor references (`%N`), types (`f32[8,seq]`), dims and polynomials, and tensor values.
//! Every reader skips the spaces before its token and reports a [`ParseError`] at the
//! column where the token should start.

use super::{ParseError, R};
use crate::dtype::DType;
use crate::shape::{Dim, Shape};

/// A cursor on one line.
pub(super) struct Cur<'a> {
    pub(super) line: usize,
    pub(super) text: &'a str,
    pub(super) pos: usize,
}

impl<'a> Cur<'a> {
    pub(super) fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }

    pub(super) fn at_end(&self) -> bool {
        self.rest().is_empty()
    }

    pub(super) fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    pub(super) fn bump(&mut self) {
        if let Some(ch) = self.peek() {
            self.pos += ch.len_utf8();
        }
    }

    pub(super) fn ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.bump();
        }
    }

    pub(super) fn err(&self, expected: impl Into<String>) -> ParseError {
        self.err_at(self.pos, expected)
    }

    pub(super) fn err_at(&self, pos: usize, expected: impl Into<String>) -> ParseError {
        let rest = &self.text[pos..];
        let found = if rest.is_empty() {
            "the end of the line".to_string()
        } else {
            let token: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace())
                .take(24)
                .collect();
            format!("`{token}`")
        };
        ParseError {
            line: self.line,
            column: self.text[..pos].chars().count() + 1,
            expected: expected.into(),
            found,
        }
    }

    /// Skip spaces, then `s` if it comes next.
    pub(super) fn eat(&mut self, s: &str) -> bool {
        self.ws();
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    pub(super) fn expect(&mut self, s: &str) -> R<()> {
        if self.eat(s) {
            Ok(())
        } else {
            Err(self.err(format!("`{s}`")))
        }
    }

    /// The longest run of characters satisfying `ok` (after spaces).
    pub(super) fn take(&mut self, ok: impl Fn(char) -> bool) -> &'a str {
        self.ws();
        let start = self.pos;
        while self.peek().is_some_and(&ok) {
            self.bump();
        }
        &self.text[start..self.pos]
    }

    pub(super) fn word(&mut self) -> &'a str {
        self.take(|c| c.is_alphanumeric() || "_.+:-".contains(c))
    }

    pub(super) fn number<T: std::str::FromStr>(&mut self, what: &str) -> R<T> {
        self.ws();
        let start = self.pos;
        let tok = self.take(|c| c.is_ascii_digit() || c == '-');
        tok.parse().map_err(|_| self.err_at(start, what))
    }

    pub(super) fn end(&mut self) -> R<()> {
        self.ws();
        if self.at_end() {
            Ok(())
        } else {
            Err(self.err("the end of the line"))
        }
    }

    /// A string as Rust's `{:?}` writes it.
    pub(super) fn string(&mut self) -> R<String> {
        self.ws();
        let start = self.pos;
        if self.peek() != Some('"') {
            return Err(self.err("a quoted name"));
        }
        self.bump();
        let mut s = String::new();
        loop {
            let Some(ch) = self.peek() else {
                return Err(self.err_at(start, "a string closed by `\"`"));
            };
            self.bump();
            match ch {
                '"' => return Ok(s),
                '\\' => {
                    let esc = self.pos;
                    let e = self.peek();
                    self.bump();
                    match e {
                        Some('n') => s.push('\n'),
                        Some('r') => s.push('\r'),
                        Some('t') => s.push('\t'),
                        Some('0') => s.push('\0'),
                        Some(c @ ('\\' | '"' | '\'')) => s.push(c),
                        Some('u') if self.eat("{") => {
                            let hex = self.take(|c| c.is_ascii_hexdigit());
                            let c = u32::from_str_radix(hex, 16).ok().and_then(char::from_u32);
                            match (c, self.eat("}")) {
                                (Some(c), true) => s.push(c),
                                _ => return Err(self.err_at(esc, "a `\\u{…}` escape")),
                            }
                        }
                        _ => return Err(self.err_at(esc, "an escape (\\n, \\\", \\u{…}, …)")),
                    }
                }
                c => s.push(c),
            }
        }
    }

    /// `%N`, returning N and where it started.
    pub(super) fn tref(&mut self) -> R<(usize, usize)> {
        self.ws();
        let start = self.pos;
        if !self.eat("%") {
            return Err(self.err("a tensor `%N`"));
        }
        if self.peek() == Some('?') {
            return Err(self.err_at(
                start,
                "a tensor defined on an earlier line (`%?\"name\"` is one read before it is computed)",
            ));
        }
        let n = self.take(|c| c.is_ascii_digit());
        n.parse()
            .map(|n| (n, start))
            .map_err(|_| self.err_at(start, "a tensor `%N`"))
    }

    /// `f32[8,seq]`, `?[?]`.
    pub(super) fn ty(&mut self) -> R<(Option<DType>, Option<Shape>)> {
        let dtype = self.dtype()?;
        self.ws();
        if self.rest().starts_with("[?]") {
            self.pos += 3;
            return Ok((dtype, None));
        }
        self.expect("[")?;
        let mut dims = Vec::new();
        if !self.eat("]") {
            loop {
                dims.push(self.dim()?);
                if self.eat("]") {
                    break;
                }
                self.expect(",")?;
            }
        }
        Ok((dtype, Some(Shape(dims))))
    }

    pub(super) fn dtype(&mut self) -> R<Option<DType>> {
        if self.eat("?") {
            return Ok(None);
        }
        let start = self.pos;
        let name = self.take(|c| c.is_ascii_alphanumeric());
        DType::from_name(name)
            .map(Some)
            .ok_or_else(|| self.err_at(start, "a dtype (f32, i64, bool, …, or `?`)"))
    }

    fn dim(&mut self) -> R<Dim> {
        if self.eat("(") {
            let d = self.poly()?;
            self.expect(")")?;
            return Ok(d);
        }
        self.factor()
    }

    /// `2*batch*seq + 4`, `-seq + 1`.
    fn poly(&mut self) -> R<Dim> {
        let neg = self.eat("-");
        let first = self.term()?;
        let mut acc = if neg {
            Dim::Known(0).sub(&first)
        } else {
            first
        };
        loop {
            if self.eat("+") {
                acc = acc.add(&self.term()?);
            } else if self.eat("-") {
                acc = acc.sub(&self.term()?);
            } else {
                return Ok(acc);
            }
        }
    }

    fn term(&mut self) -> R<Dim> {
        let mut acc = self.factor()?;
        while self.eat("*") {
            acc = acc.mul(&self.factor()?);
        }
        Ok(acc)
    }

    fn factor(&mut self) -> R<Dim> {
        self.ws();
        let start = self.pos;
        let tok = self.take(|c| !c.is_whitespace() && !",[]()*+".contains(c));
        if tok.is_empty() {
            return Err(self.err("a dim (a number, a symbol or a `(…)` expression)"));
        }
        if tok.chars().all(|c| c.is_ascii_digit()) {
            return tok
                .parse()
                .map(Dim::Known)
                .map_err(|_| self.err_at(start, "a dim that fits in 64 bits"));
        }
        Ok(Dim::sym(tok))
    }

    /// `[v, …]` for a tensor of `dtype`, as little-endian raw bytes.
    pub(super) fn values(&mut self, dtype: Option<DType>) -> R<Vec<u8>> {
        self.ws();
        let start = self.pos;
        self.expect("[")?;
        let mut raw = Vec::new();
        loop {
            self.ws();
            let at = self.pos;
            let tok = self.take(|c| !c.is_whitespace() && !",]".contains(c));
            let bad = |c: &Cur, what: &str| c.err_at(at, what);
            match dtype {
                Some(DType::F32) => {
                    let v: f32 = tok.parse().map_err(|_| bad(self, "an f32 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::I64) => {
                    let v: i64 = tok.parse().map_err(|_| bad(self, "an i64 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::I32) => {
                    let v: i32 = tok.parse().map_err(|_| bad(self, "an i32 value"))?;
                    raw.extend(v.to_le_bytes());
                }
                Some(DType::Bool) => match tok {
                    "true" => raw.push(1),
                    "false" => raw.push(0),
                    _ => return Err(bad(self, "`true` or `false`")),
                },
                _ => {
                    return Err(self.err_at(start, "values only for f32, i64, i32 and bool tensors"))
                }
            }
            if self.eat("]") {
                return Ok(raw);
            }
            self.expect(",")?;
        }
    }
}
