//! Topic names as the node takes them: anything that names a [`Topic`], parsed once.

use rdma_wire::Topic;

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
}
