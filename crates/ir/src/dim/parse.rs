//! Parsing the display syntax: `+ - * // % ^`, parentheses, integers, identifiers, `max(..)`, `min(..)`.
//!
//! Precedence follows Python: `^` binds tightest (and to the right of a unary minus: `-N^2 == -(N^2)`),
//! then unary minus, then `* // %` (left-associative), then `+ -`.

use std::str::FromStr;

use super::Expr;

/// A parse failure at a byte offset of the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse expression at byte {pos}: {msg}")]
pub struct ParseError {
    pub pos: usize,
    pub msg: String,
}

/// Nesting beyond this depth is rejected so that hostile input cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
    depth: usize,
}

impl Parser<'_> {
    fn err<T>(&self, msg: &str) -> Result<T, ParseError> {
        Err(ParseError {
            pos: self.pos,
            msg: msg.to_string(),
        })
    }

    fn skip_ws(&mut self) {
        while self.pos < self.s.len() && self.s[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.pos..].starts_with(tok.as_bytes()) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn enter(&mut self) -> Result<(), ParseError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return self.err("expression nested too deeply");
        }
        Ok(())
    }

    fn sum(&mut self) -> Result<Expr, ParseError> {
        self.enter()?;
        let mut acc = self.product()?;
        loop {
            if self.eat("+") {
                acc = &acc + &self.product()?;
            } else if self.eat("-") {
                acc = &acc - &self.product()?;
            } else {
                break;
            }
        }
        self.depth -= 1;
        Ok(acc)
    }

    fn product(&mut self) -> Result<Expr, ParseError> {
        let mut acc = self.unary()?;
        loop {
            if self.eat("//") {
                acc = acc.floor_div(&self.unary()?);
            } else if self.eat("*") {
                acc = &acc * &self.unary()?;
            } else if self.eat("%") {
                acc = acc.rem(&self.unary()?);
            } else {
                break;
            }
        }
        Ok(acc)
    }

    fn unary(&mut self) -> Result<Expr, ParseError> {
        if self.eat("-") {
            self.enter()?;
            let e = -self.unary()?;
            self.depth -= 1;
            return Ok(e);
        }
        let base = self.primary()?;
        if self.eat("^") {
            self.skip_ws();
            let start = self.pos;
            while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
            let Ok(p) = digits.parse::<u32>() else {
                return self.err("expected a u32 exponent");
            };
            if p > 64 && base.terms().len() > 1 {
                return self.err("exponent above 64 on a sum");
            }
            return Ok(base.pow(p));
        }
        Ok(base)
    }

    fn primary(&mut self) -> Result<Expr, ParseError> {
        let Some(c) = self.peek() else {
            return self.err("unexpected end of input");
        };
        if c == b'(' {
            self.pos += 1;
            let e = self.sum()?;
            if !self.eat(")") {
                return self.err("expected `)`");
            }
            return Ok(e);
        }
        let start = self.pos;
        if c.is_ascii_digit() {
            while self.pos < self.s.len() && self.s[self.pos].is_ascii_digit() {
                self.pos += 1;
            }
            let digits = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
            return match digits.parse::<i64>() {
                Ok(v) => Ok(Expr::int(v)),
                Err(_) => self.err("integer literal out of range"),
            };
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while self.pos < self.s.len()
                && (self.s[self.pos].is_ascii_alphanumeric() || self.s[self.pos] == b'_')
            {
                self.pos += 1;
            }
            let name = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
            if (name == "max" || name == "min") && self.eat("(") {
                let mut args = vec![self.sum()?];
                while self.eat(",") {
                    args.push(self.sum()?);
                }
                if !self.eat(")") {
                    return self.err("expected `)` or `,`");
                }
                let r = if name == "max" {
                    Expr::max_of(&args)
                } else {
                    Expr::min_of(&args)
                };
                return Ok(r.unwrap_or_else(Expr::zero));
            }
            return Ok(Expr::sym(name));
        }
        self.err("expected an integer, a symbol, `max(`, `min(` or `(`")
    }
}

impl FromStr for Expr {
    type Err = ParseError;

    /// Parses the syntax that `Display` prints. Symbols are ASCII identifiers.
    fn from_str(s: &str) -> Result<Expr, ParseError> {
        let mut p = Parser {
            s: s.as_bytes(),
            pos: 0,
            depth: 0,
        };
        let e = p.sum()?;
        if p.peek().is_some() {
            return p.err("unexpected trailing input");
        }
        Ok(e)
    }
}
