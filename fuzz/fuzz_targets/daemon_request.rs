//! Fuzzes taskdiagd's request framing (crates/daemon/src/request.rs) over arbitrary client
//! input, fed in arbitrary pieces: every step either waits for more bytes or uses at least one
//! byte and yields a request or an error with a message; a fatal error ends the connection;
//! never a panic, never a request that does not re-serialize to the bytes it came from.
//!
//! The module is compiled in directly rather than through the daemon crate, which would bring
//! libbpf (a C build) into the sanitizer build; it depends only on taskdiag-proto and libc.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../../crates/daemon/src/request.rs"]
#[allow(dead_code)]
mod request;

use request::{next_frame, truncated, Frame};

fuzz_target!(|data: &[u8]| {
    // The first byte decides the sizes of the pieces the input arrives in.
    let Some((&step, data)) = data.split_first() else { return };
    let step = usize::from(step % 64) + 1;
    let mut input: Vec<u8> = Vec::new();
    let mut fed = 0;
    loop {
        match next_frame(&input) {
            None => {
                if fed == data.len() {
                    if !input.is_empty() {
                        assert!(matches!(truncated(&input), Frame::Invalid { fatal: true, .. }));
                    }
                    return;
                }
                let n = step.min(data.len() - fed);
                input.extend_from_slice(&data[fed..fed + n]);
                fed += n;
            }
            Some((used, frame)) => {
                assert!(used >= 1 && used <= input.len());
                match frame {
                    Frame::Request(r) => {
                        assert_eq!(used, taskdiag_proto::Request::SIZE);
                        assert_eq!(&r.to_bytes()[..], &input[..used]);
                    }
                    Frame::Invalid { errno, message, fatal } => {
                        assert!(errno > 0 && !message.is_empty());
                        if fatal {
                            return;
                        }
                    }
                }
                input.drain(..used);
            }
        }
    }
});
