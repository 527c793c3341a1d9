//! The NIC thread of a soft device: a `mio` loop over the listeners and connections that
//! parses incoming frames, serves remote READs and WRITEs from registered memory, places
//! SENDs into posted receives (with RNR waits), and completes work requests.
//!
//! | file | job |
//! |---|---|
//! | `state.rs` | the thread's state; finding a connection, discarding or answering a frame, pausing a peer that does not read |
//! | `teardown.rs` | closing connections: broken, disconnected, the last event, a stream lost before it was bound; closing everything when the device stops |
//! | `hand_streams.rs` | queue pairs connected by hand: the data port's streams up to their hello, binding them, the answer and READY frames, requests that waited too long for a stream |
//! | `cm_frames.rs` | accepting TCP connections, finishing TCP connects, CONNECT_REQ / ACCEPT / REJECT / DISCONNECT, HELLO / READY |
//! | `data_frames.rs` | ACKs and READ responses for this end's requests; the peer's READs (the responder), WRITEs and SENDs (RNR) |
//! | `reader.rs` | framing the stream into headers and payloads, within a read budget per turn |
//! | `timeouts.rs` | timers as they fire: connect, handshake, close linger, RNR retries, a stalled output, a stream's or a hello's wait |
//! | `same_host.rs` | what the same-host streams are told: open connections, region grants, inboxes |
//! | `event_loop.rs` | the loop: commands, ready connections, timers, the poll of the sockets |

mod cm_frames;
mod data_frames;
mod event_loop;
mod hand_streams;
mod reader;
mod same_host;
mod state;
mod teardown;
mod timeouts;

pub(crate) use event_loop::run;
pub use state::OUTPUT_STALL_TIMEOUT;
