//! Which topic names the node accepts, for publishers, subscriptions and announced topics.

use crate::error::{Error, Result};

/// Validates a topic name.
pub(crate) fn check_topic(topic: &str) -> Result<()> {
    let detail = if topic.is_empty() {
        "it is empty"
    } else if topic.len() > 200 {
        "it is longer than 200 bytes"
    } else if topic.chars().any(|c| c.is_control()) {
        "it contains control characters"
    } else {
        return Ok(());
    };
    Err(Error::InvalidTopic { topic: topic.chars().take(64).collect(), detail })
}
