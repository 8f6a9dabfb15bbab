//! Fuzzes the stream decoder: any bytes must decode to events or an error, never a panic, and a
//! stream re-encoded from what decoded must decode to the same tasks.
#![no_main]
use libfuzzer_sys::fuzz_target;
use taskdiag_proto::msg::Messages;
use taskdiag_proto::task::{Event, StreamDecoder};

fuzz_target!(|data: &[u8]| {
    let _ = StreamDecoder::decode_all(data);
    let mut dec = StreamDecoder::new();
    let mut tasks = Vec::new();
    for m in Messages::new(data) {
        let Ok(m) = m else { break };
        match dec.push(&m) {
            Ok(Some(Event::Task(t))) => tasks.push(t),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    let mut buf = Vec::new();
    for t in &tasks {
        t.encode(&mut buf);
    }
    let mut asm = taskdiag_proto::task::TaskAssembler::new();
    let again: Vec<_> =
        Messages::new(&buf).filter_map(|m| asm.push(&m.expect("re-encoded")).expect("valid")).collect();
    assert_eq!(again, tasks);
});
