//! Fuzzes request parsing: any bytes give a request or a typed error, never a panic; a parsed
//! request re-serializes to the same 32 bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use taskdiag_proto::Request;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Request::parse(data) {
        assert_eq!(&r.to_bytes()[..], &data[..Request::SIZE]);
    }
});
