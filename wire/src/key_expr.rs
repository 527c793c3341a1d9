//! Key expressions following the Zenoh "Key Expressions" RFC.
//!
//! A *key* is a non-empty, `/`-separated list of non-empty chunks. A *key expression* (KE) is a key in
//! which chunks may be replaced by wildcards, so that it denotes a set of keys:
//!
//! * `*` alone in a chunk matches exactly one chunk;
//! * `**` alone in a chunk matches any number of chunks, zero included;
//! * `$*` anywhere inside a chunk matches any run of characters inside that chunk, the empty run included
//!   (`a$*b$*c`). `*` is accepted nowhere else: `a*`, `**b` or `***` are refused.
//! * A chunk starting with `@` is *verbatim*: it is matched only by the identical chunk, never by `*`, `**`
//!   or a `$*` pattern (`**` cannot cross it). A verbatim chunk may itself contain `$*` (the RFC lists
//!   `my-api/@$*/**` as a key expression); it is then still matched only by the identical chunk.
//!
//! `?` and `#` are forbidden everywhere, and `$` is only allowed as part of `$*`.
//!
//! [`KeyExpr::new`] validates its input and stores the RFC's canonical form, so that two key expressions
//! denote the same set of keys if and only if their strings are equal:
//!
//! * runs of `$*` collapse into one (`a$*$*b` → `a$*b`);
//! * runs of `**` chunks collapse into one (`a/**/**` → `a/**`);
//! * a chunk that is only `$*` becomes `*`;
//! * `**/*` becomes `*/**`, repeatedly (`**/*/*` → `*/*/**`).
//!
//! [`KeyExpr::intersects`] and [`KeyExpr::includes`] are exact set relations over keys. Both run in
//! polynomial time (dynamic programming over chunk indices, and over bytes inside `$*` chunks) and inputs
//! are bounded by [`MAX_KEY_EXPR_LEN`], so a hostile peer cannot make matching expensive.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

/// Maximum length, in bytes, of the string accepted by [`KeyExpr::new`] (checked before canonicalization).
pub const MAX_KEY_EXPR_LEN: usize = 1024;

const SINGLE_WILD: &str = "*";
const DOUBLE_WILD: &str = "**";
const STAR_DSL: &str = "$*";

/// Why a string is not a valid key expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyExprError {
    /// The string is empty.
    #[error("invalid key expression: it is empty")]
    Empty,
    /// The string is longer than [`MAX_KEY_EXPR_LEN`] bytes.
    #[error("invalid key expression: it is {len} bytes long, the maximum is {max} bytes")]
    TooLong {
        /// Length of the rejected string, in bytes.
        len: usize,
        /// The maximum allowed length, in bytes.
        max: usize,
    },
    /// A chunk is empty: leading or trailing `/`, or `//`.
    #[error("invalid key expression: chunk {index} is empty (leading `/`, trailing `/` or `//`)")]
    EmptyChunk {
        /// Zero-based index of the empty chunk.
        index: usize,
    },
    /// A chunk contains `?` or `#`, or a `$` that is not part of `$*`.
    #[error(
        "invalid key expression: chunk {index} `{chunk}` contains the forbidden character `{ch}` \
         (`?` and `#` are never allowed, `$` only as part of `$*`)"
    )]
    ForbiddenChar {
        /// Zero-based index of the offending chunk.
        index: usize,
        /// The offending chunk, as written.
        chunk: String,
        /// The forbidden character.
        ch: char,
    },
    /// A chunk uses `*` other than as a whole `*` or `**` chunk or as part of `$*` (e.g. `a*`, `**b`, `***`).
    #[error(
        "invalid key expression: chunk {index} `{chunk}` misuses a wildcard \
         (`*` and `**` must be alone in their chunk, only `$*` may appear inside a chunk)"
    )]
    BadWildcard {
        /// Zero-based index of the offending chunk.
        index: usize,
        /// The offending chunk, as written.
        chunk: String,
    },
}

/// A validated key expression, stored in canonical form.
///
/// Equality, ordering and hashing are those of the canonical string, so equal values denote equal sets of
/// keys. The string is shared: a clone is a reference count, so a subscription can hand each message its
/// topic without allocating.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyExpr {
    canon: Arc<str>,
}

/// A chunk after validation, with its `$*` runs already collapsed.
enum ParsedChunk {
    Single,
    Double,
    Other(String),
}

fn parse_chunk(index: usize, chunk: &str) -> Result<ParsedChunk, KeyExprError> {
    match chunk {
        "" => return Err(KeyExprError::EmptyChunk { index }),
        SINGLE_WILD => return Ok(ParsedChunk::Single),
        DOUBLE_WILD => return Ok(ParsedChunk::Double),
        _ => {}
    }
    let forbidden = |ch| KeyExprError::ForbiddenChar { index, chunk: chunk.to_owned(), ch };
    let mut out = String::with_capacity(chunk.len());
    let mut after_dsl = false;
    let mut chars = chunk.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '$' => {
                if chars.next_if_eq(&'*').is_none() {
                    return Err(forbidden('$'));
                }
                if !after_dsl {
                    out.push_str(STAR_DSL);
                    after_dsl = true;
                }
            }
            '*' => {
                return Err(KeyExprError::BadWildcard { index, chunk: chunk.to_owned() });
            }
            '?' | '#' => return Err(forbidden(ch)),
            _ => {
                out.push(ch);
                after_dsl = false;
            }
        }
    }
    if out == STAR_DSL {
        Ok(ParsedChunk::Single)
    } else {
        Ok(ParsedChunk::Other(out))
    }
}

fn push_chunk(out: &mut String, chunk: &str) {
    if !out.is_empty() {
        out.push('/');
    }
    out.push_str(chunk);
}

/// Writes a run of wild chunks in canonical order: every `*` first, then at most one `**`.
fn flush_wilds(out: &mut String, singles: &mut usize, double: &mut bool) {
    for _ in 0..*singles {
        push_chunk(out, SINGLE_WILD);
    }
    if *double {
        push_chunk(out, DOUBLE_WILD);
    }
    *singles = 0;
    *double = false;
}

impl KeyExpr {
    /// Validates `s` and builds the key expression from its canonical form.
    ///
    /// # Errors
    ///
    /// Returns a [`KeyExprError`] if `s` is empty, longer than [`MAX_KEY_EXPR_LEN`] bytes, or has an invalid
    /// chunk; the error names the first offending chunk and its index.
    pub fn new(s: &str) -> Result<KeyExpr, KeyExprError> {
        if s.is_empty() {
            return Err(KeyExprError::Empty);
        }
        if s.len() > MAX_KEY_EXPR_LEN {
            return Err(KeyExprError::TooLong { len: s.len(), max: MAX_KEY_EXPR_LEN });
        }
        let mut canon = String::with_capacity(s.len());
        let mut singles = 0;
        let mut double = false;
        for (index, chunk) in s.split('/').enumerate() {
            match parse_chunk(index, chunk)? {
                ParsedChunk::Single => singles += 1,
                ParsedChunk::Double => double = true,
                ParsedChunk::Other(text) => {
                    flush_wilds(&mut canon, &mut singles, &mut double);
                    push_chunk(&mut canon, &text);
                }
            }
        }
        flush_wilds(&mut canon, &mut singles, &mut double);
        Ok(KeyExpr { canon: canon.into() })
    }

    /// The canonical form of this key expression.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.canon
    }

    /// Whether every key matched by `other` is also matched by `self`.
    #[must_use]
    pub fn includes(&self, other: &KeyExpr) -> bool {
        if self == other {
            return true;
        }
        let a: Vec<&str> = self.chunks().collect();
        let b: Vec<&str> = other.chunks().collect();
        expr_includes(&a, &b)
    }

    /// Whether at least one key is matched by both `self` and `other`.
    #[must_use]
    pub fn intersects(&self, other: &KeyExpr) -> bool {
        if self == other {
            return true;
        }
        if !self.is_wild() && !other.is_wild() {
            return false;
        }
        let a: Vec<&str> = self.chunks().collect();
        let b: Vec<&str> = other.chunks().collect();
        expr_intersects(&a, &b)
    }

    /// Whether this key expression contains a wildcard (`*`, `**` or `$*`, even inside a verbatim chunk).
    #[must_use]
    pub fn is_wild(&self) -> bool {
        self.canon.contains('*')
    }

    /// The `/`-separated chunks of the canonical form.
    pub fn chunks(&self) -> impl Iterator<Item = &str> {
        self.canon.split('/')
    }
}

impl fmt::Display for KeyExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.canon)
    }
}

impl FromStr for KeyExpr {
    type Err = KeyExprError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        KeyExpr::new(s)
    }
}

impl TryFrom<&str> for KeyExpr {
    type Error = KeyExprError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        KeyExpr::new(s)
    }
}

impl TryFrom<String> for KeyExpr {
    type Error = KeyExprError;

    fn try_from(s: String) -> Result<Self, Self::Error> {
        KeyExpr::new(&s)
    }
}

impl AsRef<str> for KeyExpr {
    fn as_ref(&self) -> &str {
        &self.canon
    }
}

// ---------------------------------------------------------------------------------------------------------
// Matching. All functions below work on canonical chunks: `*` and `**` chunks stand alone, every `$` is the
// start of a `$*`, and no `$*` directly follows another.
// ---------------------------------------------------------------------------------------------------------

fn is_verbatim(chunk: &str) -> bool {
    chunk.starts_with('@')
}

/// One element of a non-verbatim chunk: a literal byte or a `$*`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Tok {
    Byte(u8),
    Star,
}

fn tokens(chunk: &str) -> Vec<Tok> {
    let bytes = chunk.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' {
            out.push(Tok::Star);
            i += 2;
        } else {
            out.push(Tok::Byte(bytes[i]));
            i += 1;
        }
    }
    out
}

/// Whether two `$*` patterns share an instance. Row `x` of the table tells, for each `y`, whether
/// `left[x..]` and `right[y..]` do; rows are filled from the end, two at a time.
fn patterns_intersect(left: &[Tok], right: &[Tok]) -> bool {
    let len = right.len();
    let mut next = vec![false; len + 1];
    next[len] = true;
    for y in (0..len).rev() {
        next[y] = right[y] == Tok::Star && next[y + 1];
    }
    let mut cur = vec![false; len + 1];
    for &tok in left.iter().rev() {
        for y in (0..=len).rev() {
            cur[y] = match (tok, right.get(y)) {
                (Tok::Star, _) => next[y] || (y < len && cur[y + 1]),
                (Tok::Byte(_), Some(Tok::Star)) => cur[y + 1] || next[y],
                (Tok::Byte(l), Some(&Tok::Byte(r))) => l == r && next[y + 1],
                (Tok::Byte(_), None) => false,
            };
        }
        std::mem::swap(&mut cur, &mut next);
    }
    next[0]
}

/// Whether every instance of pattern `narrow` is an instance of pattern `wide`.
///
/// This holds iff `wide` matches `narrow` read as a word in which each `$*` is a fresh symbol that only a
/// `$*` of `wide` can absorb (for the converse, instantiate those `$*`s with a character absent from `wide`).
fn pattern_includes(wide: &[Tok], narrow: &[Tok]) -> bool {
    let len = narrow.len();
    let mut next = vec![false; len + 1];
    next[len] = true;
    let mut cur = vec![false; len + 1];
    for &tok in wide.iter().rev() {
        for y in (0..=len).rev() {
            cur[y] = match tok {
                Tok::Star => next[y] || (y < len && cur[y + 1]),
                Tok::Byte(l) => y < len && narrow[y] == Tok::Byte(l) && next[y + 1],
            };
        }
        std::mem::swap(&mut cur, &mut next);
    }
    next[0]
}

/// Intersection of two chunks, neither of which is `**`.
fn chunk_intersects(left: &str, right: &str) -> bool {
    if left == right {
        return true;
    }
    if is_verbatim(left) || is_verbatim(right) {
        return false;
    }
    if left == SINGLE_WILD || right == SINGLE_WILD {
        return true;
    }
    if !left.contains('$') && !right.contains('$') {
        return false;
    }
    patterns_intersect(&tokens(left), &tokens(right))
}

/// Inclusion of chunk `narrow` in chunk `wide`, neither of which is `**`.
fn chunk_includes(wide: &str, narrow: &str) -> bool {
    if wide == narrow {
        return true;
    }
    if is_verbatim(wide) || is_verbatim(narrow) {
        return false;
    }
    if wide == SINGLE_WILD {
        return true;
    }
    if narrow == SINGLE_WILD || !wide.contains('$') {
        return false;
    }
    pattern_includes(&tokens(wide), &tokens(narrow))
}

/// Whether the chunk lists `left` and `right` share a key.
///
/// `reach[i][j]` tells whether `left[i..]` and `right[j..]` share a key; it is filled from the ends backwards.
fn expr_intersects(left: &[&str], right: &[&str]) -> bool {
    let (rows, cols) = (left.len(), right.len());
    let width = cols + 1;
    let at = |i: usize, j: usize| i * width + j;
    let mut reach = vec![false; (rows + 1) * width];
    reach[at(rows, cols)] = true;
    for i in (0..=rows).rev() {
        for j in (0..=cols).rev() {
            if i == rows && j == cols {
                continue;
            }
            let left_double = i < rows && left[i] == DOUBLE_WILD;
            let right_double = j < cols && right[j] == DOUBLE_WILD;
            reach[at(i, j)] = if left_double || right_double {
                // A `**` either matches nothing more, or swallows one chunk matched by the other side's
                // current chunk, which must then be non-verbatim (a `**` never matches a verbatim chunk).
                let left_swallows = j < cols && !is_verbatim(right[j]) && reach[at(i, j + 1)];
                let right_swallows = i < rows && !is_verbatim(left[i]) && reach[at(i + 1, j)];
                (left_double && (reach[at(i + 1, j)] || left_swallows))
                    || (right_double && (reach[at(i, j + 1)] || right_swallows))
            } else {
                i < rows && j < cols && chunk_intersects(left[i], right[j]) && reach[at(i + 1, j + 1)]
            };
        }
    }
    reach[0]
}

/// Whether every key of the chunk list `narrow` is a key of the chunk list `wide` (both canonical).
///
/// Canonical `wide` is a sequence of solid chunks and of wild runs: `*`…`*` (exactly that many chunks) or
/// `*`…`*/**` (at least as many chunks as it has `*`s, possibly zero). `wide` includes `narrow` iff the solid
/// chunks of `wide` map in order onto non-`**` chunks of `narrow` that they include, and each wild run maps
/// onto the contiguous span of `narrow` between its neighbours: a span without `**` of exactly the run's
/// length, or, for a run ending in `**`, a span with at least as many non-`**` chunks as the run has `*`s.
/// Spans never contain verbatim chunks. Such a mapping obviously implies inclusion; conversely, the match of
/// the key of `narrow` whose `**`s are long runs of a fresh chunk yields a mapping once runs that come out too
/// short are pushed right, which the brute-force oracle of the tests cross-checks.
///
/// `hits[i][j]` counts the `j' >= j` for which `wide[i..]` includes `narrow[j'..]`, which answers "is there
/// such a `j'` in a range" in constant time.
fn expr_includes(wide: &[&str], narrow: &[&str]) -> bool {
    let (rows, cols) = (wide.len(), narrow.len());
    let width = cols + 2;
    let at = |i: usize, j: usize| i * width + j;
    // counted[j]: number of non-`**` chunks in narrow[..j].
    let mut counted = vec![0usize; cols + 1];
    for (j, chunk) in narrow.iter().enumerate() {
        counted[j + 1] = counted[j] + usize::from(*chunk != DOUBLE_WILD);
    }
    // fence[j]: index of the first verbatim chunk of narrow at or after j, or cols.
    let mut fence = vec![cols; cols + 1];
    // plain[j]: number of consecutive chunks from j that are neither `**` nor verbatim.
    let mut plain = vec![0usize; cols + 1];
    for (j, chunk) in narrow.iter().enumerate().rev() {
        fence[j] = if is_verbatim(chunk) { j } else { fence[j + 1] };
        plain[j] = if *chunk == DOUBLE_WILD || is_verbatim(chunk) { 0 } else { plain[j + 1] + 1 };
    }
    // stars[i]: number of consecutive `*` chunks of wide from i.
    let mut stars = vec![0usize; rows + 1];
    for (i, chunk) in wide.iter().enumerate().rev() {
        stars[i] = if *chunk == SINGLE_WILD { stars[i + 1] + 1 } else { 0 };
    }

    // Last row: the empty suffix of `wide` includes only the empty suffix of `narrow`.
    let mut hits = vec![0usize; (rows + 1) * width];
    hits[at(rows, 0)..=at(rows, cols)].fill(1);
    let holds = |hits: &[usize], i: usize, j: usize| hits[at(i, j)] > hits[at(i, j + 1)];
    let any_in = |hits: &[usize], i: usize, range: (usize, usize)| {
        range.0 <= range.1 && hits[at(i, range.0)] > hits[at(i, range.1 + 1)]
    };

    for (i, chunk) in wide.iter().enumerate().rev() {
        for j in (0..=cols).rev() {
            let value = if *chunk == DOUBLE_WILD {
                any_in(&hits, i + 1, (j, fence[j]))
            } else if *chunk == SINGLE_WILD {
                let end = i + stars[i];
                if end < rows && wide[end] == DOUBLE_WILD {
                    let target = counted[j] + stars[i];
                    let first = j + counted[j..].partition_point(|&c| c < target);
                    first <= cols && any_in(&hits, end + 1, (first, fence[j]))
                } else {
                    plain[j] >= stars[i] && holds(&hits, end, j + stars[i])
                }
            } else {
                j < cols && narrow[j] != DOUBLE_WILD && chunk_includes(chunk, narrow[j]) && holds(&hits, i + 1, j + 1)
            };
            hits[at(i, j)] = hits[at(i, j + 1)] + usize::from(value);
        }
    }
    holds(&hits, 0, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeSet, HashSet, VecDeque};

    fn ke(s: &str) -> KeyExpr {
        KeyExpr::new(s).unwrap_or_else(|e| panic!("`{s}` should be valid: {e}"))
    }

    fn includes(a: &str, b: &str) -> bool {
        ke(a).includes(&ke(b))
    }

    fn intersects(a: &str, b: &str) -> bool {
        let (a, b) = (ke(a), ke(b));
        let forward = a.intersects(&b);
        assert_eq!(forward, b.intersects(&a), "intersects is not symmetric for `{a}` and `{b}`");
        forward
    }

    // ----------------------------------------------------------------------------------------------------
    // Brute-force reference.
    //
    // A key is a list of chunks. A chunk starting with `@` is an opaque verbatim atom (it may even contain
    // `$*`, like the RFC's `@$*`); any other key chunk is a plain string. `naive_match` is a direct,
    // exponential, recursive reading of the RFC.
    // ----------------------------------------------------------------------------------------------------

    fn glob(pattern: &[u8], key: &[u8]) -> bool {
        match pattern {
            [] => key.is_empty(),
            [b'$', b'*', rest @ ..] => (0..=key.len()).any(|cut| glob(rest, &key[cut..])),
            [c, rest @ ..] => key.first() == Some(c) && glob(rest, &key[1..]),
        }
    }

    fn naive_chunk_match(pattern: &str, key: &str) -> bool {
        if pattern.starts_with('@') || key.starts_with('@') {
            pattern == key
        } else {
            pattern == "*" || glob(pattern.as_bytes(), key.as_bytes())
        }
    }

    fn naive_match<S: AsRef<str>>(pattern: &[&str], key: &[S]) -> bool {
        match pattern.split_first() {
            None => key.is_empty(),
            Some((&"**", rest)) => (0..=key.len())
                .take_while(|&taken| taken == 0 || !key[taken - 1].as_ref().starts_with('@'))
                .any(|taken| naive_match(rest, &key[taken..])),
            Some((chunk, rest)) => {
                !key.is_empty() && naive_chunk_match(chunk, key[0].as_ref()) && naive_match(rest, &key[1..])
            }
        }
    }

    /// Fresh chunk content: no expression used in these tests contains `~`.
    const FRESH: &str = "~";

    /// The "hardest" keys of `b`: `*` → `~`, `$*` → `~`, each `**` → 0..=`max_run` copies of chunk `~`;
    /// verbatim chunks are kept as they are.
    fn hardened_keys(b: &[&str], max_run: usize) -> Vec<Vec<String>> {
        let mut keys = vec![Vec::new()];
        for &chunk in b {
            let mut next = Vec::new();
            for key in &keys {
                if chunk == "**" {
                    for run in 0..=max_run {
                        let mut k: Vec<String> = key.clone();
                        k.extend(std::iter::repeat_n(FRESH.to_owned(), run));
                        next.push(k);
                    }
                } else {
                    let mut k = key.clone();
                    k.push(if chunk.starts_with('@') { chunk.to_owned() } else { chunk.replace("$*", FRESH) });
                    next.push(k);
                }
            }
            keys = next;
        }
        keys
    }

    /// Reference for `a.includes(b)`: every hardened key of `b` (runs up to `a.len() + 1`) matches `a`.
    ///
    /// Sound and complete when `~` is fresh for `a`. Soundness (`a` ⊇ `b` ⇒ true) is immediate since
    /// hardened keys are keys of `b`. Completeness: a non-verbatim chunk of `a` other than `*`/`**` cannot
    /// match chunk `~` and matches a hardened chunk `Q[$*:=~]` only if it includes the whole chunk `Q`
    /// (the `~`s must be swallowed by its own `$*`s); so whenever a hardened key matches, every key of `b`
    /// with the same `**` run lengths matches. A run of `a.len() + 1` `~`s cannot all be matched by `a`'s
    /// `*` chunks, so one of them sits in a `**` of `a`, which can swallow any longer run too.
    fn oracle_includes(a: &KeyExpr, b: &KeyExpr) -> bool {
        let a_chunks: Vec<&str> = a.chunks().collect();
        let b_chunks: Vec<&str> = b.chunks().collect();
        hardened_keys(&b_chunks, a_chunks.len() + 1).iter().all(|key| naive_match(&a_chunks, key))
    }

    /// Set of pattern positions reachable after the `**` ε-moves.
    fn closure(pattern: &[&str], mut states: BTreeSet<usize>) -> BTreeSet<usize> {
        for (i, chunk) in pattern.iter().enumerate() {
            if *chunk == "**" && states.contains(&i) {
                states.insert(i + 1);
            }
        }
        states
    }

    fn step(pattern: &[&str], states: &BTreeSet<usize>, key_chunk: &str) -> BTreeSet<usize> {
        let mut out = BTreeSet::new();
        for &i in states {
            if i < pattern.len() {
                if pattern[i] == "**" {
                    if !key_chunk.starts_with('@') {
                        out.insert(i);
                    }
                } else if naive_chunk_match(pattern[i], key_chunk) {
                    out.insert(i + 1);
                }
            }
        }
        closure(pattern, out)
    }

    /// Key chunks enumerated by `oracle_intersects`: every string over {a, b} of length 1 to 4, the fresh
    /// `~`, the verbatim atoms of both expressions and their other chunks with every `$*` removed.
    fn chunk_universe(a: &KeyExpr, b: &KeyExpr) -> Vec<String> {
        let mut universe = BTreeSet::from([FRESH.to_owned()]);
        let mut layer = vec![String::new()];
        for _ in 0..4 {
            layer = layer.iter().flat_map(|s| [format!("{s}a"), format!("{s}b")]).collect();
            universe.extend(layer.iter().cloned());
        }
        for chunk in a.chunks().chain(b.chunks()).filter(|c| !c.is_empty() && *c != "*" && *c != "**") {
            universe.insert(if chunk.starts_with('@') { chunk.to_owned() } else { chunk.replace("$*", "") });
        }
        universe.remove("");
        universe.into_iter().collect()
    }

    /// Reference for `a.intersects(b)`: explores every key (of any length) built from `chunk_universe`,
    /// via the subset construction of both patterns read as automata over chunks.
    ///
    /// Always sound (a key found is a common key). Complete for the generated expressions: their
    /// non-verbatim chunks use only the letters `a` and `b` with at most two literal bytes each, so two
    /// such chunks that intersect share an instance over {a, b} of length at most 4 (each byte of a
    /// shortest common instance comes from a literal of one side), and `*` against anything is witnessed by
    /// `~` or by such a string.
    fn oracle_intersects(a: &KeyExpr, b: &KeyExpr) -> bool {
        let pa: Vec<&str> = a.chunks().collect();
        let pb: Vec<&str> = b.chunks().collect();
        let universe = chunk_universe(a, b);
        let start = (closure(&pa, BTreeSet::from([0])), closure(&pb, BTreeSet::from([0])));
        let mut seen = HashSet::from([start.clone()]);
        let mut queue = VecDeque::from([start]);
        while let Some((sa, sb)) = queue.pop_front() {
            if sa.contains(&pa.len()) && sb.contains(&pb.len()) {
                return true;
            }
            for chunk in &universe {
                let next = (step(&pa, &sa, chunk), step(&pb, &sb, chunk));
                if !next.0.is_empty() && !next.1.is_empty() && seen.insert(next.clone()) {
                    queue.push_back(next);
                }
            }
        }
        false
    }

    /// For hand-written examples: the includes oracle is exact; the intersects oracle is only known to be
    /// complete for generated expressions, so only its witnesses are checked here.
    fn assert_agrees_with_oracles(a: &KeyExpr, b: &KeyExpr) {
        assert_eq!(a.includes(b), oracle_includes(a, b), "includes(`{a}`, `{b}`)");
        if oracle_intersects(a, b) {
            assert!(a.intersects(b), "intersects(`{a}`, `{b}`) has a witness");
        }
    }

    // ----------------------------------------------------------------------------------------------------
    // Examples from the RFC.
    // ----------------------------------------------------------------------------------------------------

    #[test]
    fn rfc_single_wild() {
        let e = "a/*/b";
        for k in ["a/c/b", "a/hi/b"] {
            assert!(includes(e, k), "{e} includes {k}");
        }
        for k in ["*/a/b", "*/*/*"] {
            assert!(intersects(e, k), "{e} intersects {k}");
            assert!(!includes(e, k), "{e} does not include {k}");
        }
        assert!(!includes("*/a/b", e) && includes("*/*/*", e));
        for k in ["a/*/c", "b/*/a", "a/hi/there/b", "a/hi/*/b"] {
            assert!(!intersects(e, k), "{e} is disjoint with {k}");
        }
    }

    #[test]
    fn rfc_double_wild() {
        let e = "a/**/b";
        for k in ["a/b", "a/**/b/b", "a/*/b", "a/*/*/b", "a/*/**/b", "a/**/c/**/b"] {
            assert!(includes(e, k), "{e} includes {k}");
            assert!(intersects(e, k), "{e} intersects {k}");
        }
        for k in ["**/b", "a/**"] {
            assert!(intersects(e, k), "{e} intersects {k}");
            assert!(!includes(e, k), "{e} does not include {k}");
        }
        assert!(!intersects(e, "a/**/b/c"));
        assert!(includes("**", "a/b/c/*/**"));
    }

    #[test]
    fn rfc_star_dsl() {
        let e = "a/c$*/b";
        assert!(includes(e, "a/cool/b"));
        for k in ["a/*/b", "a/$*c/b"] {
            assert!(intersects(e, k), "{e} intersects {k}");
        }
        assert!(!intersects(e, "a/uncool/b"));
        assert!(includes("a/*/b", e));
    }

    #[test]
    fn rfc_verbatim() {
        // The RFC says "none of these intersect"; read literally that would include the last two, which
        // share `my-api/x`. What it means is that each verbatim one is disjoint from all the others.
        let all = ["my-api/@v1/**", "my-api/@v2/**", "my-api/@$*/**", "my-api/*/**", "my-api/**"];
        for (x, a) in all.iter().enumerate() {
            for (y, b) in all.iter().enumerate() {
                assert_eq!(intersects(a, b), x == y || (x >= 3 && y >= 3), "{a} vs {b}");
            }
        }
        assert!(includes("my-api/**", "my-api/*/**"));
        assert!(includes("my-api/@$*/**", "my-api/@$*/a"));
        assert!(!intersects("my-api/@$*/**", "my-api/@v1"));
        // `@` separates variable-length sections: `**` cannot match it.
        let f = "src/**/@/dst/**";
        assert!(includes(f, "src/a/b/@/dst/c"));
        assert!(!intersects(f, "src/a/@/b/@/dst/c"));
        assert!(!intersects("src/**/dst/**", "src/a/@/dst/c"));
        // Hermetic namespaces.
        assert!(!intersects("zetta/*/paris", "zetta/@fr/paris"));
        assert!(intersects("zetta/*/paris", "zetta/fr/paris"));
        assert!(!intersects("**", "@zetta"));
        assert!(!intersects("**", "a/@b/c"));
        assert!(includes("**", "a/b/c"));
    }

    #[test]
    fn rfc_canon_forms() {
        for (raw, canon) in [
            ("hello/foo$*$*/bar", "hello/foo$*/bar"),
            ("hello/**/**/bye", "hello/**/bye"),
            ("hello/**/**", "hello/**"),
            ("hello/$*/bye", "hello/*/bye"),
            ("hello/$*$*/bye", "hello/*/bye"),
            ("$*/hello/$*/bye", "*/hello/*/bye"),
            ("$*$*$*/hello/$*/bye/$*", "*/hello/*/bye/*"),
            ("$*$*$*/hello/$*$*/bye/$*$*", "*/hello/*/bye/*"),
            ("hello/**/*", "hello/*/**"),
            ("**/*/*", "*/*/**"),
            ("**/*/**/*/**", "*/*/**"),
            ("**/$*/a/**/**/$*$*/b$*$*$*c", "*/**/a/*/**/b$*c"),
            ("a$*$*", "a$*"),
            ("@$*$*/**/**", "@$*/**"),
            ("**", "**"),
            ("$*", "*"),
        ] {
            let k = ke(raw);
            assert_eq!(k.as_str(), canon, "canon of {raw}");
            assert_eq!(ke(canon), k, "canon of {raw} is stable");
        }
    }

    #[test]
    fn invalid_strings() {
        use KeyExprError as E;
        let bad_wild = |index: usize, chunk: &str| E::BadWildcard { index, chunk: chunk.to_owned() };
        let forbidden = |index: usize, chunk: &str, ch| E::ForbiddenChar { index, chunk: chunk.to_owned(), ch };
        for (raw, err) in [
            ("", E::Empty),
            ("/", E::EmptyChunk { index: 0 }),
            ("/a/b/", E::EmptyChunk { index: 0 }),
            ("/a/b", E::EmptyChunk { index: 0 }),
            ("a/b/", E::EmptyChunk { index: 2 }),
            ("a//b", E::EmptyChunk { index: 1 }),
            ("a/b/*$*", bad_wild(2, "*$*")),
            ("a/b/$**", bad_wild(2, "$**")),
            ("a/b/**$*", bad_wild(2, "**$*")),
            ("a/b/*$**", bad_wild(2, "*$**")),
            ("a/b/*$***", bad_wild(2, "*$***")),
            ("a/b/**$**", bad_wild(2, "**$**")),
            ("a/b/**$***", bad_wild(2, "**$***")),
            ("a*", bad_wild(0, "a*")),
            ("x/**b", bad_wild(1, "**b")),
            ("x/a**", bad_wild(1, "a**")),
            ("***", bad_wild(0, "***")),
            ("@*", bad_wild(0, "@*")),
            ("a/b?c", forbidden(1, "b?c", '?')),
            ("a/b/#", forbidden(2, "#", '#')),
            ("a$", forbidden(0, "a$", '$')),
            ("$", forbidden(0, "$", '$')),
            ("a/$a", forbidden(1, "$a", '$')),
            ("a/$$*", forbidden(1, "$$*", '$')),
            ("a/$*$", forbidden(1, "$*$", '$')),
            ("a/@$", forbidden(1, "@$", '$')),
        ] {
            assert_eq!(KeyExpr::new(raw), Err(err), "error for {raw:?}");
        }
    }

    #[test]
    fn error_messages_name_chunk_and_reason() {
        let msg = KeyExpr::new("a/b/c?d").unwrap_err().to_string();
        assert!(msg.contains("chunk 2") && msg.contains("`c?d`") && msg.contains("`?`"), "{msg}");
        let msg = KeyExpr::new("a/x**").unwrap_err().to_string();
        assert!(msg.contains("chunk 1") && msg.contains("`x**`") && msg.contains("wildcard"), "{msg}");
        let msg = KeyExpr::new("a//b").unwrap_err().to_string();
        assert!(msg.contains("chunk 1") && msg.contains("empty"), "{msg}");
        let msg = KeyExpr::new(&"a".repeat(MAX_KEY_EXPR_LEN + 1)).unwrap_err().to_string();
        assert!(msg.contains("1025") && msg.contains("1024"), "{msg}");
    }

    #[test]
    fn length_bound() {
        assert!(KeyExpr::new(&"a".repeat(MAX_KEY_EXPR_LEN)).is_ok());
        assert_eq!(
            KeyExpr::new(&"a".repeat(MAX_KEY_EXPR_LEN + 1)),
            Err(KeyExprError::TooLong { len: MAX_KEY_EXPR_LEN + 1, max: MAX_KEY_EXPR_LEN })
        );
        // The bound applies to the input, even if its canonical form would be short.
        let long = vec!["**"; 400].join("/");
        assert!(matches!(KeyExpr::new(&long), Err(KeyExprError::TooLong { .. })));
    }

    #[test]
    fn zenoh_intersection_examples() {
        for (a, b, expected) in [
            ("a", "a", true),
            ("a/b", "a/b", true),
            ("*", "abc", true),
            ("ab$*", "abcd", true),
            ("ab$*d", "abcd", true),
            ("ab$*", "ab", true),
            ("ab/*", "ab", false),
            ("a/*/c/*/e", "a/b/c/d/e", true),
            ("a/$*b/c/$*d/e", "a/xb/c/xd/e", true),
            ("a/*/c/*/e", "a/c/e", false),
            ("a/*/c/*/e", "a/b/c/d/x/e", false),
            ("ab$*cd", "abxxcxxd", false),
            ("ab$*cd", "abxxcxxcd", true),
            ("ab$*cd", "abxxcxxcdx", false),
            ("**", "a/b/c", true),
            ("ab/**", "ab", true),
            ("**/xyz", "a/b/xyz/d/e/f/xyz", true),
            ("**/xyz$*xyz", "a/b/xyz/d/e/f/xyz", false),
            ("**/xyz$*xyz", "a/b/xyzdefxyz", true),
            ("a/**/c/**/e", "a/c/e", true),
            ("a/**/c/*/e/*", "a/b/b/b/c/d/d/c/d/e/f", true),
            ("a/**/c/*/e/*", "a/b/b/b/c/d/d/c/d/d/e/f", false),
            ("x/*", "x/abc$*", true),
            ("x/$*abc", "x/abc$*", true),
            ("x/a$*", "x/abc$*", true),
            ("x/a$*de", "x/abc$*de", true),
            ("x/a$*d$*e", "x/a$*e", true),
            ("x/a$*d$*e", "x/a$*c$*e", true),
            ("x/a$*d$*e", "x/ade", true),
            ("x/c$*", "x/abc$*", false),
            ("x/$*d", "x/$*e", false),
            ("a$*", "$*b", true),
            ("a$*b", "c$*", false),
            ("$*a$*", "b$*b", true),
            ("a$*a", "$*b$*", true),
            ("a$*a", "aa", true),
            ("a$*a", "a", false),
            ("@a", "@ab", false),
            ("@a", "@a/*", false),
            ("@a", "@a$*/**", false),
            ("@a", "@a/**", true),
            ("**/xyz$*xyz", "@a/b/xyzdefxyz", false),
            ("@a/**/c/**/e", "@a/@b/b/b/c/d/d/d/e", false),
            ("@a/**/@c/**/e", "@a/b/b/b/@c/d/d/d/e", true),
            ("@a/**/e", "@a/b/b/@c/b/d/d/d/e", false),
            ("@a/*", "@a/@b", false),
            ("@a/**", "@a/@b", false),
            ("@a/**/@b", "@a/@b", true),
            ("@a/@b/**", "@a/@b", true),
            ("@a/**/@c/**/@b", "@a/**/@c/@b", true),
            ("@a/**/@c/@b", "@a/@c/**/@b", true),
            ("@a/**/@b", "@a/**/@c/**/@b", false),
            ("@a", "**/@a", true),
            ("$*@", "@", false),
            ("$*x", "@x", false),
            ("a/**", "**/b", true),
            ("**/a/**", "**/b/**", true),
            ("*/*", "**/a/**/b/**", true),
            ("*", "**/a/**/b/**", false),
        ] {
            assert_eq!(intersects(a, b), expected, "intersects({a}, {b})");
            assert_agrees_with_oracles(&ke(a), &ke(b));
        }
    }

    #[test]
    fn zenoh_inclusion_examples() {
        for (a, b, expected) in [
            ("*", "abc", true),
            ("ab$*", "abcd", true),
            ("ab$*d", "abcd", true),
            ("ab$*", "ab", true),
            ("ab/*", "ab", false),
            ("a/*/c/*/e", "a/b/c/d/e", true),
            ("a/*/c/*/e", "a/c/e", false),
            ("ab$*cd", "abxxcxxd", false),
            ("ab$*c$*d", "abxxcxxd", true),
            ("ab$*cd", "abxxcxxcd", true),
            ("**", "abc", true),
            ("ab/**", "ab", true),
            ("**/xyz", "a/b/xyz/d/e/f/xyz", true),
            ("**/xyz$*xyz", "a/b/xyz/d/e/f/xyz", false),
            ("**/xyz$*xyz", "a/b/xyzdefxyz", true),
            ("a/**/c/**/e", "a/c/e", true),
            ("a/**/c/*/e/*", "a/b/b/b/c/d/d/c/d/e/f", true),
            ("x/abc", "abc", false),
            ("x/*", "x/abc$*", true),
            ("x/$*abc", "x/abc$*", false),
            ("x/a$*", "x/abc$*", true),
            ("x/abc$*", "x/a$*", false),
            ("x/a$*de", "x/abc$*de", true),
            ("x/a$*e", "x/a$*d$*e", true),
            ("x/a$*d$*e", "x/a$*e", false),
            ("x/a$*d$*e", "x/a$*c$*e", false),
            ("x/a$*d$*e", "x/ade", true),
            ("x/c$*", "x/abc$*", false),
            ("x/$*c$*", "x/abc$*", true),
            ("x/$*d", "x/$*e", false),
            ("a/$*", "a/b$*", true),
            ("a$*", "ab$*", true),
            ("a$*a", "a$*a$*a", true),
            ("a$*a$*a", "a$*a", false),
            ("@a", "@ab", false),
            ("@a", "@a/*", false),
            ("@a$*/**", "@a", false),
            ("@a", "@a/**", false),
            ("@a/**", "@a", true),
            ("**/xyz$*xyz", "@a/b/xyzdefxyz", false),
            ("@a/*", "@a/@b", false),
            ("@a/**", "@a/@b", false),
            ("@a/**/@b", "@a/@b", true),
            ("@a/@b/**", "@a/@b", true),
            ("a/**", "a/@v", false),
            ("a/**", "a/b/*", true),
            ("a/*", "a/b", true),
            ("a/**", "a/b/**/@v", false),
            ("**/@v/**", "a/@v/*/**", true),
            // Exact set semantics, where zenoh's left-to-right includer answers `false`: every key of
            // `**/x` has at least one chunk, so `*/**` (one chunk or more) includes it.
            ("*/**", "**/x", true),
            ("*/*/**", "**/x/**/y", true),
            ("*/*/**", "**/x/**", false),
            ("a/*/**", "a/**/b/**", true),
            ("**/*/**/b", "**/a/**/b", true),
            ("*/**", "**", false),
            ("*/**/a", "**/a", false),
        ] {
            assert_eq!(includes(a, b), expected, "includes({a}, {b})");
            assert_agrees_with_oracles(&ke(a), &ke(b));
        }
    }

    #[test]
    fn is_wild_chunks_and_traits() {
        assert!(!ke("a/b/@c").is_wild());
        for wild in ["*", "a/**", "a$*", "@a$*"] {
            assert!(ke(wild).is_wild(), "{wild}");
        }
        let k = ke("a/**/**/$*/b$*$*");
        assert_eq!(k.chunks().collect::<Vec<_>>(), ["a", "*", "**", "b$*"]);
        assert_eq!(k.to_string(), "a/*/**/b$*");
        assert_eq!(k.as_ref(), k.as_str());
        assert_eq!("a/**/**/$*/b$*$*".parse::<KeyExpr>(), Ok(k.clone()));
        assert_eq!(KeyExpr::try_from("a/**/**/$*/b$*$*"), Ok(k.clone()));
        assert_eq!(KeyExpr::try_from(String::from("a/*/**/b$*")), Ok(k.clone()));
        assert!(KeyExpr::try_from("a//b").is_err());
        assert!(KeyExpr::try_from(String::new()).is_err());
        assert!(ke("a/b") < ke("a/c"));
        let set: HashSet<KeyExpr> = [ke("a/**/**"), ke("a/**")].into_iter().collect();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn hostile_inputs_stay_cheap() {
        // Many `$*` per chunk, many `**`: the polynomial algorithms answer at once even in debug builds.
        let dsl = format!("{}b", "a$*".repeat(340));
        let dsl2 = format!("{}$*b", "$*a".repeat(340));
        assert!(ke(&dsl).intersects(&ke(&dsl2)));
        assert!(!ke(&dsl).includes(&ke(&dsl2)));
        let doubles = vec!["**/a"; 200].join("/");
        let stars = vec!["*/**/b"; 140].join("/");
        assert!(ke(&doubles).intersects(&ke(&format!("{doubles}/a"))));
        assert!(!ke(&stars).intersects(&ke(&doubles)));
        assert!(!ke(&doubles).includes(&ke(&stars)));
        assert!(ke("*/**").includes(&ke(&stars)));
    }

    // ----------------------------------------------------------------------------------------------------
    // Property tests.
    // ----------------------------------------------------------------------------------------------------

    /// Chunks for generated expressions: small alphabet so that collisions are frequent.
    const CHUNKS: &[&str] = &["a", "b", "ab", "*", "**", "a$*", "$*b", "a$*b", "$*a$*", "@x", "@"];
    /// Extra spellings that are only valid before canonicalization.
    const RAW_CHUNKS: &[&str] = &["$*", "$*$*", "a$*$*b", "**", "*", "a", "@x$*$*", "$*$*b"];
    /// Chunks for literal keys (no wildcard).
    const LITERAL_CHUNKS: &[&str] = &["a", "b", "ab", "ba", "aab", "c", "@x", "@"];

    fn expr() -> impl Strategy<Value = KeyExpr> {
        prop::collection::vec(prop::sample::select(CHUNKS), 1..=4).prop_map(|c| ke(&c.join("/")))
    }

    fn raw_expr() -> impl Strategy<Value = String> {
        let chunk = prop::sample::select([CHUNKS, RAW_CHUNKS].concat());
        prop::collection::vec(chunk, 1..=6).prop_map(|c| c.join("/"))
    }

    fn literal() -> impl Strategy<Value = Vec<&'static str>> {
        prop::collection::vec(prop::sample::select(LITERAL_CHUNKS), 1..=4)
    }

    /// Fillers for wildcards in `refinement`: what a `**`, a `*` and a `$*` of `a` may be replaced by.
    const DOUBLE_FILL: &[&str] = &["", "*", "**", "a", "ab", "a$*", "*/**", "**/b/**", "*/a/*", "b/**/*"];
    const SINGLE_FILL: &[&str] = &["*", "a", "b", "ab", "a$*", "$*b", "a$*b"];
    const DSL_FILL: &[&str] = &["", "a", "b", "$*", "a$*", "$*b$*", "ba"];

    /// An expression `a` and a refinement of it (wildcards of `a` replaced by narrower patterns), which
    /// `a` must include whatever the matching algorithm.
    fn refinement() -> impl Strategy<Value = (KeyExpr, KeyExpr)> {
        (expr(), prop::collection::vec(0..100usize, 64)).prop_map(|(a, picks)| {
            let mut picks = picks.into_iter().cycle();
            let mut pick = |options: &[&'static str]| options[picks.next().unwrap_or(0) % options.len()];
            let mut parts = Vec::new();
            for chunk in a.chunks() {
                let part = match chunk {
                    "**" => pick(DOUBLE_FILL).to_owned(),
                    "*" => pick(SINGLE_FILL).to_owned(),
                    c if c.starts_with('@') => c.to_owned(),
                    c => c.split("$*").collect::<Vec<_>>().join(pick(DSL_FILL)),
                };
                if !part.is_empty() {
                    parts.push(part);
                }
            }
            let b = if parts.is_empty() { None } else { KeyExpr::new(&parts.join("/")).ok() };
            (a.clone(), b.unwrap_or(a))
        })
    }

    /// Case count of every property test: enough for frequent collisions, a fraction of a second in debug.
    fn config() -> ProptestConfig {
        ProptestConfig::with_cases(512)
    }

    #[test]
    fn refinements_are_included() {
        proptest!(config(), |((a, b) in refinement())| {
            prop_assert!(a.includes(&b), "{} includes its refinement {}", a, b);
            prop_assert!(a.intersects(&b));
        });
    }

    #[test]
    fn canonicalization_is_idempotent() {
        proptest!(config(), |(raw in raw_expr())| {
            let k = ke(&raw);
            prop_assert_eq!(ke(k.as_str()), k.clone());
            prop_assert!(!k.as_str().contains("**/*") && !k.as_str().contains("$*$*"));
        });
    }

    #[test]
    fn relations_are_consistent() {
        proptest!(config(), |(a in expr(), b in expr())| {
            prop_assert!(a.includes(&a) && a.intersects(&a));
            prop_assert_eq!(a.intersects(&b), b.intersects(&a));
            if a.includes(&b) {
                prop_assert!(a.intersects(&b));
                prop_assert_eq!(b.includes(&a), a == b);
            }
        });
    }

    #[test]
    fn matches_brute_force_oracles() {
        proptest!(config(), |(a in expr(), b in expr())| {
            prop_assert_eq!(a.includes(&b), oracle_includes(&a, &b), "includes({}, {})", a, b);
            prop_assert_eq!(a.intersects(&b), oracle_intersects(&a, &b), "intersects({}, {})", a, b);
        });
    }

    #[test]
    fn literal_keys() {
        proptest!(config(), |(a in expr(), key in literal(), other in literal())| {
            let l = ke(&key.join("/"));
            let o = ke(&other.join("/"));
            prop_assert!(!l.is_wild());
            let matched = naive_match(&a.chunks().collect::<Vec<_>>(), &key);
            prop_assert_eq!(a.intersects(&l), matched, "intersects({}, {})", a, l);
            prop_assert_eq!(a.includes(&l), matched, "includes({}, {})", a, l);
            prop_assert_eq!(l.includes(&o), l == o);
            prop_assert_eq!(l.intersects(&o), l == o);
            if !a.is_wild() {
                prop_assert_eq!(a.includes(&l), a == l);
            }
        });
    }

    /// Exhaustive cross-check over every pair of short expressions (slow in debug builds: run with
    /// `cargo test -- --ignored`).
    #[test]
    #[ignore = "exhaustive, takes a while"]
    fn exhaustive_small_expressions() {
        let alphabet = ["a", "*", "**", "a$*", "$*b", "@x"];
        let mut exprs = BTreeSet::new();
        let mut layer = vec![String::new()];
        for _ in 0..3 {
            layer = layer
                .iter()
                .flat_map(|p| {
                    alphabet.iter().map(move |c| if p.is_empty() { (*c).to_owned() } else { format!("{p}/{c}") })
                })
                .collect();
            exprs.extend(layer.iter().map(|s| ke(s)));
        }
        for a in &exprs {
            for b in &exprs {
                assert_eq!(a.includes(b), oracle_includes(a, b), "includes(`{a}`, `{b}`)");
                assert_eq!(a.intersects(b), oracle_intersects(a, b), "intersects(`{a}`, `{b}`)");
            }
        }
    }
}
