//! Topics: the names publishers publish under, validated once, with their wire id computed once.

use std::fmt;
use std::str::FromStr;

use crate::key_expr::{KeyExpr, KeyExprError};
use crate::protocol::TopicId;

/// Longest topic name, in bytes: announcements carry topic names, so they stay short.
pub const MAX_TOPIC_LEN: usize = 200;

/// Why a string is not a topic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TopicError {
    /// It is not a key expression (see [`KeyExpr`] for the rules: `/`-separated non-empty
    /// chunks, no `?` or `#`, `$` only in `$*`).
    #[error(transparent)]
    KeyExpr(#[from] KeyExprError),
    /// It has a wildcard: a topic names one stream, so a publisher needs one. (A subscription
    /// takes a pattern too: it is then a [`KeyExpr`].)
    #[error(
        "{topic:?} has a wildcard (`*`, `**` or `$*`): a topic names one stream (a publisher needs one; only a subscription takes a pattern)"
    )]
    Wildcard {
        /// The name given.
        topic: String,
    },
    /// It is longer than [`MAX_TOPIC_LEN`].
    #[error("a topic of {len} bytes is longer than the limit of {max} bytes")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// [`MAX_TOPIC_LEN`].
        max: usize,
    },
    /// It contains a control character (a newline, a NUL, ...).
    #[error("the topic has a control character at byte {index}")]
    ControlCharacter {
        /// The byte offset of the first one.
        index: usize,
    },
}

/// A topic: a key expression without wildcards (such as `sensors/kitchen/temperature`), at
/// most [`MAX_TOPIC_LEN`] bytes, without control characters. Parsed once, with its wire
/// identifier ([`TopicId`], FNV-1a 64 of the name) computed once; cheap to clone.
///
/// ```
/// use rdma_wire::Topic;
///
/// let topic = Topic::new("sensors/kitchen/temperature")?;
/// assert_eq!(topic.as_str(), "sensors/kitchen/temperature");
/// assert!(Topic::new("sensors/*").is_err(), "a pattern is not a topic");
/// assert!(Topic::new("sensors//kitchen").is_err(), "chunks are not empty");
/// # Ok::<(), rdma_wire::TopicError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Topic {
    key: KeyExpr,
    id: TopicId,
}

impl Topic {
    /// Validates `name` as a topic.
    ///
    /// # Errors
    /// [`TopicError`] saying which rule it breaks (and for a key-expression rule, which chunk).
    pub fn new(name: &str) -> Result<Topic, TopicError> {
        if name.len() > MAX_TOPIC_LEN {
            return Err(TopicError::TooLong { len: name.len(), max: MAX_TOPIC_LEN });
        }
        if let Some(index) = name.find(char::is_control) {
            return Err(TopicError::ControlCharacter { index });
        }
        let key = KeyExpr::new(name)?;
        if key.is_wild() {
            return Err(TopicError::Wildcard { topic: name.to_owned() });
        }
        let id = TopicId::of(key.as_str());
        Ok(Topic { key, id })
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.key.as_str()
    }

    /// The identifier on the wire.
    pub fn id(&self) -> TopicId {
        self.id
    }

    /// The topic as a key expression (which includes exactly this topic).
    pub fn as_key_expr(&self) -> &KeyExpr {
        &self.key
    }
}

impl fmt::Debug for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Topic({:?})", self.as_str())
    }
}

impl fmt::Display for Topic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Topic {
    type Err = TopicError;
    fn from_str(s: &str) -> Result<Topic, TopicError> {
        Topic::new(s)
    }
}

impl TryFrom<&str> for Topic {
    type Error = TopicError;
    fn try_from(s: &str) -> Result<Topic, TopicError> {
        Topic::new(s)
    }
}

impl TryFrom<String> for Topic {
    type Error = TopicError;
    fn try_from(s: String) -> Result<Topic, TopicError> {
        Topic::new(&s)
    }
}

impl AsRef<str> for Topic {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl From<Topic> for KeyExpr {
    fn from(topic: Topic) -> KeyExpr {
        topic.key
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topic_is_a_key_expression_without_wildcards_and_its_id_is_its_names() {
        let t = Topic::new("sensors/@raw/kitchen-1").unwrap();
        assert_eq!((t.as_str(), t.id()), ("sensors/@raw/kitchen-1", TopicId::of("sensors/@raw/kitchen-1")));
        assert_eq!(t.to_string(), "sensors/@raw/kitchen-1");
        assert_eq!(format!("{t:?}"), "Topic(\"sensors/@raw/kitchen-1\")");
        assert!(t.as_key_expr().includes(&KeyExpr::new("sensors/@raw/kitchen-1").unwrap()));
        assert!(!KeyExpr::new("sensors/**").unwrap().includes(t.as_key_expr()), "only `@raw` matches `@raw`");
        assert!(KeyExpr::new("sensors/@raw/**").unwrap().includes(t.as_key_expr()));
        assert_eq!("prices".parse::<Topic>().unwrap(), Topic::try_from(String::from("prices")).unwrap());
    }

    #[test]
    fn each_rule_a_name_breaks_is_its_own_error() {
        for pattern in ["sensors/*", "sensors/**", "a$*", "**"] {
            assert!(matches!(Topic::new(pattern), Err(TopicError::Wildcard { .. })), "{pattern}");
        }
        for bad in ["", "/a", "a/", "a//b", "a?b", "a#b", "a$b"] {
            assert!(matches!(Topic::new(bad), Err(TopicError::KeyExpr(_))), "{bad:?}");
        }
        let long = "x".repeat(MAX_TOPIC_LEN + 1);
        assert_eq!(Topic::new(&long), Err(TopicError::TooLong { len: MAX_TOPIC_LEN + 1, max: MAX_TOPIC_LEN }));
        assert!(Topic::new(&"x".repeat(MAX_TOPIC_LEN)).is_ok());
        assert_eq!(Topic::new("a\nb"), Err(TopicError::ControlCharacter { index: 1 }));
        assert!(Topic::new("sensors/*").unwrap_err().to_string().contains("only a subscription takes a pattern"));
    }
}
