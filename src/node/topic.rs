//! Topic names as the node takes them: anything that names a [`Topic`] (publishers), or a
//! topic or pattern ([`IntoKeyExpr`], subscriptions), parsed once; and what a subscription
//! reads, [`TopicFilter`].

use rdma_wire::{KeyExpr, Topic, TopicError};

use crate::error::{Error, Result};

/// What names a topic: a [`Topic`] already parsed, or a string parsed when the builder's
/// `create` runs (`&str`, `String`). Sealed: the node's builders take it.
pub trait IntoTopic: sealed::Sealed {
    /// The topic, or [`Error::InvalidTopic`] naming the rule the name breaks.
    ///
    /// # Errors
    /// [`Error::InvalidTopic`] for a name that is not a topic (see [`Topic`]).
    fn into_topic(self) -> Result<Topic>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for &str {}
    impl Sealed for String {}
    impl Sealed for &String {}
    impl Sealed for rdma_wire::Topic {}
    impl Sealed for &rdma_wire::Topic {}
    impl Sealed for rdma_wire::KeyExpr {}
    impl Sealed for &rdma_wire::KeyExpr {}
}

/// Parses a topic name, naming the rule it breaks in the error.
fn parse(name: &str) -> Result<Topic> {
    Topic::new(name).map_err(|e| Error::InvalidTopic { topic: name.chars().take(64).collect(), detail: e.to_string() })
}

impl IntoTopic for &str {
    fn into_topic(self) -> Result<Topic> {
        parse(self)
    }
}

impl IntoTopic for String {
    fn into_topic(self) -> Result<Topic> {
        parse(&self)
    }
}

impl IntoTopic for &String {
    fn into_topic(self) -> Result<Topic> {
        parse(self)
    }
}

impl IntoTopic for Topic {
    fn into_topic(self) -> Result<Topic> {
        Ok(self)
    }
}

impl IntoTopic for &Topic {
    fn into_topic(self) -> Result<Topic> {
        Ok(self.clone())
    }
}

/// What names the topics of a subscription: one topic, or a key expression with wildcards
/// (`sensors/**`, `sensors/*/temperature`, `room-$*`; see [`KeyExpr`]) that names every topic
/// it includes. `&str`, `String`, [`Topic`] and [`KeyExpr`]; strings are parsed when the
/// builder's `create` runs. Sealed: the node's builders take it.
pub trait IntoKeyExpr: sealed::Sealed {
    /// The key expression, or [`Error::InvalidTopic`] naming the rule the name breaks.
    ///
    /// # Errors
    /// [`Error::InvalidTopic`] for a name that is no key expression (see [`KeyExpr`]), or
    /// breaks a topic's other rules (see [`Topic`]: at most 200 bytes, no control characters;
    /// a pattern keeps to them too).
    fn into_key_expr(self) -> Result<KeyExpr>;
}

/// Parses a topic or pattern, naming the rule it breaks in the error. A name without wildcards
/// must be a topic (the same rules, and errors, as a publisher's); a pattern keeps to a topic's
/// length (200 bytes) and has no control characters either (it is written to the stats file).
fn parse_key_expr(name: &str) -> Result<KeyExpr> {
    match Topic::new(name) {
        Ok(topic) => Ok(topic.into()),
        // (Length and control characters are checked first: a pattern keeps to a topic's.)
        Err(TopicError::Wildcard { .. }) => KeyExpr::new(name).map_err(|e| Error::InvalidTopic {
            topic: name.chars().take(64).collect(),
            detail: format!("not a pattern: {e}"),
        }),
        Err(e) => Err(Error::InvalidTopic { topic: name.chars().take(64).collect(), detail: e.to_string() }),
    }
}

impl IntoKeyExpr for &str {
    fn into_key_expr(self) -> Result<KeyExpr> {
        parse_key_expr(self)
    }
}

impl IntoKeyExpr for String {
    fn into_key_expr(self) -> Result<KeyExpr> {
        parse_key_expr(&self)
    }
}

impl IntoKeyExpr for &String {
    fn into_key_expr(self) -> Result<KeyExpr> {
        parse_key_expr(self)
    }
}

impl IntoKeyExpr for Topic {
    fn into_key_expr(self) -> Result<KeyExpr> {
        Ok(self.into())
    }
}

impl IntoKeyExpr for &Topic {
    fn into_key_expr(self) -> Result<KeyExpr> {
        Ok(self.as_key_expr().clone())
    }
}

impl IntoKeyExpr for KeyExpr {
    fn into_key_expr(self) -> Result<KeyExpr> {
        parse_key_expr(self.as_str())
    }
}

impl IntoKeyExpr for &KeyExpr {
    fn into_key_expr(self) -> Result<KeyExpr> {
        parse_key_expr(self.as_str())
    }
}

/// What a subscription reads: one topic (its publishers are found by the topic's id), or every
/// topic a pattern includes (matched, by [`KeyExpr::includes`], when a publisher is announced
/// or a node's topic listing lists it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TopicFilter {
    /// One topic.
    Exact(Topic),
    /// Every topic the key expression includes (it has a wildcard).
    Pattern(KeyExpr),
}

impl TopicFilter {
    /// The filter of a key expression: a pattern when it has a wildcard, else its topic.
    ///
    /// # Errors
    /// [`Error::InvalidTopic`] for a key expression without wildcards that is no topic (too
    /// long, a control character).
    pub(crate) fn new(key: KeyExpr) -> Result<TopicFilter> {
        if key.is_wild() {
            return Ok(TopicFilter::Pattern(key));
        }
        parse(key.as_str()).map(TopicFilter::Exact)
    }

    /// The topic, or the pattern's canonical form.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            TopicFilter::Exact(topic) => topic.as_str(),
            TopicFilter::Pattern(key) => key.as_str(),
        }
    }

    /// Whether it reads `topic`.
    pub(crate) fn matches(&self, topic: &Topic) -> bool {
        match self {
            TopicFilter::Exact(exact) => exact == topic,
            TopicFilter::Pattern(key) => key.includes(topic.as_key_expr()),
        }
    }

    /// Whether it is a pattern.
    pub(crate) fn is_pattern(&self) -> bool {
        matches!(self, TopicFilter::Pattern(_))
    }
}

/// Whether a name announced by a peer is a topic (discovery refuses announcements that name
/// anything else).
pub(crate) fn is_topic(name: &str) -> bool {
    Topic::new(name).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_of_a_name_gives_the_same_topic_and_a_bad_name_says_which_rule() {
        let topic = Topic::new("sensors/kitchen").unwrap();
        let forms = [
            "sensors/kitchen".into_topic().unwrap(),
            String::from("sensors/kitchen").into_topic().unwrap(),
            (&String::from("sensors/kitchen")).into_topic().unwrap(),
            (&topic).into_topic().unwrap(),
            topic.clone().into_topic().unwrap(),
        ];
        assert!(forms.iter().all(|t| *t == topic && t.id() == topic.id()));
        match "sensors/*".into_topic() {
            Err(Error::InvalidTopic { topic, detail }) => {
                assert_eq!(topic, "sensors/*");
                assert!(detail.contains("wildcard"), "{detail}");
            }
            other => panic!("a pattern is no topic: {other:?}"),
        }
        assert!(matches!("a//b".into_topic(), Err(Error::InvalidTopic { .. })));
        assert!(is_topic("a/b") && !is_topic("a/**") && !is_topic(""));
    }

    #[test]
    fn a_subscription_takes_a_topic_or_a_pattern_in_canonical_form() {
        let filter = |name: &str| TopicFilter::new(name.into_key_expr()?);
        let topic = Topic::new("sensors/kitchen").unwrap();
        assert_eq!(filter("sensors/kitchen").unwrap(), TopicFilter::Exact(topic.clone()));
        let pattern = filter("sensors/**/*").unwrap();
        assert!(pattern.is_pattern() && pattern.as_str() == "sensors/*/**", "{pattern:?}");
        assert!(pattern.matches(&topic) && !pattern.matches(&Topic::new("sensors").unwrap()));
        assert!(!pattern.matches(&Topic::new("actuators/door").unwrap()));
        assert_eq!(TopicFilter::new(KeyExpr::new("$*").unwrap()).unwrap().as_str(), "*");
        // A literal is held to the topic's rules; a broken pattern names its chunk.
        let long = "x".repeat(300);
        assert!(matches!(filter(&long), Err(Error::InvalidTopic { .. })));
        match filter("sensors/a*") {
            Err(Error::InvalidTopic { detail, .. }) => assert!(detail.contains("a*"), "{detail}"),
            other => panic!("a* is no pattern: {other:?}"),
        }
        assert!(matches!((&topic).into_key_expr(), Ok(k) if k.as_str() == "sensors/kitchen"));
        match "sensors/*\n".into_key_expr() {
            Err(Error::InvalidTopic { detail, .. }) => assert!(detail.contains("control character"), "{detail}"),
            other => panic!("a pattern with a newline: {other:?}"),
        }
    }
}
