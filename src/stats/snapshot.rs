//! One snapshot of a node's counters, and the text format it is rendered to and parsed from
//! (see the module doc of [`crate::stats`]).

use std::fmt::Write as _;

use super::{FORMAT_VERSION, MAGIC};

/// What a counters line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Kind {
    /// The node as a whole.
    Node,
    /// The node's discovery.
    Discovery,
    /// One publisher.
    Publisher,
    /// One subscription.
    Subscription,
    /// A topic the pattern of the subscription before it matched: its `publishers`
    /// announced now.
    Match,
}

impl Kind {
    /// Its tag in the file: `node`, `disc`, `pub`, `sub` or `match`.
    pub fn tag(self) -> &'static str {
        match self {
            Kind::Node => "node",
            Kind::Discovery => "disc",
            Kind::Publisher => "pub",
            Kind::Subscription => "sub",
            Kind::Match => "match",
        }
    }
    fn from_tag(tag: &str) -> Option<Kind> {
        match tag {
            "node" => Some(Kind::Node),
            "disc" => Some(Kind::Discovery),
            "pub" => Some(Kind::Publisher),
            "sub" => Some(Kind::Subscription),
            "match" => Some(Kind::Match),
            _ => None,
        }
    }
}

/// The counters of one node, publisher or subscription, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// What it describes.
    pub kind: Kind,
    /// The topic of a publisher or subscription.
    pub topic: Option<String>,
    /// Counter names and values, in the order written.
    pub values: Vec<(String, u64)>,
}

impl Section {
    /// The value of counter `name` (0 when absent).
    pub fn get(&self, name: &str) -> u64 {
        self.values.iter().find(|(n, _)| n == name).map_or(0, |(_, v)| *v)
    }
}

/// Totals of one topic over a node's publishers and subscriptions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicTotals {
    /// The topic.
    pub topic: String,
    /// Local publishers (0 or 1).
    pub publishers: u64,
    /// Local subscriptions.
    pub subscriptions: u64,
    /// Messages published.
    pub published: u64,
    /// Bytes published.
    pub published_bytes: u64,
    /// Messages delivered, summed over subscriptions.
    pub delivered: u64,
    /// Bytes delivered, summed over subscriptions.
    pub delivered_bytes: u64,
    /// Messages lost to overruns, summed over subscriptions.
    pub lost: u64,
    /// Subscribers dropped by the publisher.
    pub dropped: u64,
    /// The publisher's lag: bytes published and not acknowledged by its slowest subscriber.
    pub lag_bytes: u64,
}

/// One snapshot of a node's counters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The process.
    pub pid: u32,
    /// The node's id.
    pub node_id: u64,
    /// Where subscribers connect to it.
    pub addr: String,
    /// Its fabric provider.
    pub fabric: String,
    /// The node's epoch (start time, µs since the Unix epoch).
    pub epoch_us: u64,
    /// When the snapshot was taken (µs since the Unix epoch).
    pub updated_us: u64,
    /// The node's counters, then each publisher's, then each subscription's.
    pub sections: Vec<Section>,
}

/// A stats file that does not follow the format.
#[derive(Debug, thiserror::Error)]
#[error("not an rdma-pubsub stats file: {0}")]
pub struct ParseError(String);

impl Snapshot {
    /// The node's own counters.
    pub fn node(&self) -> Option<&Section> {
        self.sections.iter().find(|s| s.kind == Kind::Node)
    }
    /// The sections of one kind.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = &Section> {
        self.sections.iter().filter(move |s| s.kind == kind)
    }
    /// Totals per topic (of the node's publishers and subscriptions; a pattern is a topic of
    /// its own here), sorted by topic name.
    pub fn topics(&self) -> Vec<TopicTotals> {
        let mut topics: Vec<TopicTotals> = Vec::new();
        for s in self.sections.iter().filter(|s| matches!(s.kind, Kind::Publisher | Kind::Subscription)) {
            let Some(name) = &s.topic else { continue };
            let i = match topics.iter().position(|t| &t.topic == name) {
                Some(i) => i,
                None => {
                    topics.push(TopicTotals { topic: name.clone(), ..Default::default() });
                    topics.len() - 1
                }
            };
            let t = &mut topics[i];
            match s.kind {
                Kind::Publisher => {
                    t.publishers += 1;
                    t.published += s.get("published");
                    t.published_bytes += s.get("bytes");
                    t.dropped += s.get("dropped");
                    t.lag_bytes = t.lag_bytes.max(s.get("lag_bytes"));
                }
                Kind::Subscription => {
                    t.subscriptions += 1;
                    t.delivered += s.get("delivered");
                    t.delivered_bytes += s.get("bytes");
                    t.lost += s.get("lost");
                }
                Kind::Node | Kind::Discovery | Kind::Match => {}
            }
        }
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        topics
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(256 + 256 * self.sections.len());
        let _ = writeln!(out, "{MAGIC} {FORMAT_VERSION}");
        let _ = writeln!(out, "pid {}", self.pid);
        let _ = writeln!(out, "node {:016x}", self.node_id);
        let _ = writeln!(out, "addr {}", self.addr);
        let _ = writeln!(out, "fabric {}", self.fabric);
        let _ = writeln!(out, "epoch_us {}", self.epoch_us);
        let _ = writeln!(out, "updated_us {}", self.updated_us);
        for s in &self.sections {
            let _ = write!(out, "counters {}", s.kind.tag());
            for (name, value) in &s.values {
                let _ = write!(out, " {name}={value}");
            }
            if let Some(topic) = &s.topic {
                let _ = write!(out, " topic={topic}");
            }
            out.push('\n');
        }
        out
    }

    /// Reads a file's text.
    ///
    /// # Errors
    /// [`ParseError`] when `text` is empty, does not start with the magic line and a version,
    /// or has a malformed field or counter (unknown lines and counter names are skipped, not
    /// errors).
    pub fn parse(text: &str) -> Result<Snapshot, ParseError> {
        let mut lines = text.lines();
        let header = lines.next().ok_or_else(|| ParseError("empty".into()))?;
        match header.split_once(' ') {
            Some((MAGIC, v)) if v.parse::<u32>().is_ok() => {}
            _ => return Err(ParseError(format!("first line is {header:?}"))),
        }
        let mut snap = Snapshot {
            pid: 0,
            node_id: 0,
            addr: String::new(),
            fabric: String::new(),
            epoch_us: 0,
            updated_us: 0,
            sections: Vec::new(),
        };
        let number = |key: &str, v: &str| v.parse::<u64>().map_err(|_| ParseError(format!("{key} is {v:?}")));
        for line in lines {
            let Some((key, rest)) = line.split_once(' ') else { continue };
            match key {
                "pid" => snap.pid = number(key, rest)? as u32,
                "node" => {
                    snap.node_id = u64::from_str_radix(rest, 16).map_err(|_| ParseError(format!("node is {rest:?}")))?
                }
                "addr" => snap.addr = rest.to_owned(),
                "fabric" => snap.fabric = rest.to_owned(),
                "epoch_us" => snap.epoch_us = number(key, rest)?,
                "updated_us" => snap.updated_us = number(key, rest)?,
                "counters" => {
                    if let Some(section) = parse_section(rest)? {
                        snap.sections.push(section);
                    }
                }
                _ => {}
            }
        }
        if snap.pid == 0 {
            return Err(ParseError("no pid line".into()));
        }
        Ok(snap)
    }
}

fn parse_section(rest: &str) -> Result<Option<Section>, ParseError> {
    let (tag, mut fields) = rest.split_once(' ').unwrap_or((rest, ""));
    let Some(kind) = Kind::from_tag(tag) else { return Ok(None) };
    let mut section = Section { kind, topic: None, values: Vec::new() };
    while !fields.is_empty() {
        if let Some(topic) = fields.strip_prefix("topic=") {
            section.topic = Some(topic.to_owned());
            break;
        }
        let (field, next) = fields.split_once(' ').unwrap_or((fields, ""));
        fields = next;
        let (name, value) = field.split_once('=').ok_or_else(|| ParseError(format!("counter {field:?}")))?;
        let value = value.parse::<u64>().map_err(|_| ParseError(format!("counter {field:?}")))?;
        section.values.push((name.to_owned(), value));
    }
    Ok(Some(section))
}
