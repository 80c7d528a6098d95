use session_store::{RequestConfig, Store};
fn main() {
    let dir = std::env::args().nth(1).unwrap();
    let s = Store::open(&dir).unwrap();
    for _ in 0..50 {
        s.create_session(None, RequestConfig::default(), &[])
            .unwrap();
    }
    eprintln!("done");
}
