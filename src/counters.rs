//! Counters described once: each set of counters (a node's, its discovery's, a publisher's,
//! a subscription's) is declared with `counter_set!` as a
//! table of name, kind, unit and meaning, in the manner of Aeron's counters. The macro makes
//! the struct of atomics the code increments and the API reads, its [`Descriptor`] table, and
//! the iteration over both that the stats file is written from, so a counter declared is a
//! counter exported.
//!
//! Counters are relaxed atomics, updated on the paths they count and readable through the API
//! (`Node::counters`, `Publisher::counters`, `Subscription::counters`, ...) and from outside
//! the process through the stats file ([`crate::stats`]).
//! `node::stats_export::tests::every_declared_counter_reaches_the_stats_file` checks that each
//! declared counter reaches the file.

/// How a counter's value moves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CounterKind {
    /// Only grows: a count of things since the start.
    Total,
    /// Goes up and down: a level now.
    Gauge,
}

/// What a counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Unit {
    /// Messages.
    Messages,
    /// Bytes.
    Bytes,
    /// Operations or events (READs, acks, waits, requests, ...).
    Events,
    /// Connections or peers.
    Connections,
    /// Datagrams.
    Datagrams,
    /// A ring position (bytes from the ring's start).
    Position,
}

/// What one counter is: its name (as in the stats file and the struct's field), how its value
/// moves, what it counts and what it means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Descriptor {
    pub(crate) name: &'static str,
    pub(crate) kind: CounterKind,
    pub(crate) unit: Unit,
    pub(crate) help: &'static str,
}

impl Descriptor {
    /// The name: the struct field and the stats file's counter name.
    pub fn name(&self) -> &'static str {
        self.name
    }
    /// Total or gauge.
    pub fn kind(&self) -> CounterKind {
        self.kind
    }
    /// The unit of its value.
    pub fn unit(&self) -> Unit {
        self.unit
    }
    /// What it means (the field's doc comment, as one line).
    pub fn help(&self) -> &'static str {
        self.help.trim()
    }
}

/// A set of counters declared with `counter_set!`: read-only to the application.
pub trait CounterSet {
    /// The descriptors of the counters, in declaration order.
    const DESCRIPTORS: &'static [Descriptor];
    /// Every counter's descriptor with its current value, in declaration order.
    fn values(&self) -> Vec<(&'static Descriptor, u64)>;
}

/// Declares a set of counters: a struct of `AtomicU64` fields that only this crate writes,
/// each documented, with its kind and unit; a reader method per counter (the application reads,
/// it never writes); and its [`CounterSet`] implementation (the descriptor table).
///
/// ```ignore
/// counter_set! {
///     /// Counters of a thing.
///     pub struct ThingCounters {
///         /// Things done.
///         done: Total, Events;
///         /// Bytes held now.
///         held: Gauge, Bytes;
///     }
/// }
/// ```
macro_rules! counter_set {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $( $(#[doc = $doc:literal])+ $field:ident : $kind:ident, $unit:ident; )+
        }
    ) => {
        $(#[$meta])*
        // On lines of its own: a publishing or receiving thread writes its counters per
        // message, and a neighbour on the heap sharing a line with them (another thread's
        // counters, say) would take that line from it every time (two cache lines: the
        // adjacent-line prefetcher moves lines in pairs).
        #[derive(Debug, Default)]
        #[repr(align(128))]
        pub struct $name {
            $( $(#[doc = $doc])+ pub(crate) $field: ::std::sync::atomic::AtomicU64, )+
        }

        impl $name {
            $(
                $(#[doc = $doc])+
                #[must_use]
                pub fn $field(&self) -> u64 {
                    self.$field.load(::std::sync::atomic::Ordering::Relaxed)
                }
            )+
        }

        impl $crate::counters::CounterSet for $name {
            const DESCRIPTORS: &'static [$crate::counters::Descriptor] = &[
                $( $crate::counters::Descriptor {
                    name: stringify!($field),
                    kind: $crate::counters::CounterKind::$kind,
                    unit: $crate::counters::Unit::$unit,
                    help: concat!($($doc),+),
                }, )+
            ];
            fn values(&self) -> Vec<(&'static $crate::counters::Descriptor, u64)> {
                let values = [$( self.$field() ),+];
                Self::DESCRIPTORS.iter().zip(values).collect()
            }
        }
    };
}
pub(crate) use counter_set;

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    counter_set! {
        /// Counters of the test.
        pub struct TestCounters {
            /// Things done.
            done: Total, Events;
            /// Bytes held
            /// now.
            held: Gauge, Bytes;
        }
    }

    #[test]
    fn a_set_describes_each_counter_once_in_declaration_order() {
        let names: Vec<&str> = TestCounters::DESCRIPTORS.iter().map(|d| d.name).collect();
        assert_eq!(names, ["done", "held"]);
        assert_eq!(TestCounters::DESCRIPTORS[1].kind, CounterKind::Gauge);
        assert_eq!(TestCounters::DESCRIPTORS[1].unit, Unit::Bytes);
        assert_eq!(TestCounters::DESCRIPTORS[1].help(), "Bytes held now.");
        let c = TestCounters::default();
        c.done.fetch_add(3, Ordering::Relaxed);
        c.held.store(7, Ordering::Relaxed);
        let values: Vec<(&str, u64)> = c.values().into_iter().map(|(d, v)| (d.name, v)).collect();
        assert_eq!(values, [("done", 3), ("held", 7)]);
        assert_eq!((c.done(), c.held()), (3, 7), "each counter has its reader");
    }
}
