//! A session's log opened on its own by a relative path from inside its
//! store's root (`sessions/<id>`), after its writer's process died with
//! records and payloads that nothing synced. Alone in its binary: it
//! changes the process's working directory.

use session_store::{Item, Log, LogOptions, RequestConfig, SessionId, Store, ToolOutput};

const CHILD: &str = "SESSION_STORE_RELATIVE_ROOT_CHILD";
const TEST: &str = "a_log_opened_as_sessions_id_from_the_root_recovers_and_syncs_its_payloads";

fn big() -> Item {
    Item::ToolOutput {
        extra: Default::default(),
        id: None,
        call_id: "c1".into(),
        output: Some(ToolOutput::Text("z".repeat(100 << 10))),
        is_error: None,
        custom: false,
        status: None,
    }
}

/// In the child: writes a session with a large item into the store at
/// `root`, prints its id, and exits without closing anything.
fn write_and_die(root: &str) -> ! {
    let store = Store::open(root).unwrap();
    let (id, mut head) = store
        .create_session(None, RequestConfig::default(), &[Item::user_text("hi")])
        .unwrap();
    store
        .save_delta(id, &mut head, &[Item::user_text("read it"), big()])
        .unwrap();
    println!("id={id}");
    // No close, no sync, no mark over the save: the process ends here.
    std::process::exit(0);
}

#[test]
fn a_log_opened_as_sessions_id_from_the_root_recovers_and_syncs_its_payloads() {
    if let Ok(root) = std::env::var(CHILD) {
        write_and_die(&root);
    }
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let id: SessionId = stdout
        .lines()
        .find_map(|l| l.rsplit_once("id=").map(|(_, id)| id.trim()))
        .unwrap_or_else(|| panic!("the child wrote no session: {stdout}"))
        .parse()
        .unwrap();

    std::env::set_current_dir(dir.path()).unwrap();
    let rel = format!("sessions/{id}");
    // Its recovery finds the payload past the durable mark and syncs it,
    // and the store's root, which is "." here, before its own mark.
    let log = Log::open(&rel, LogOptions::default()).unwrap_or_else(|e| panic!("open {rel}: {e}"));
    let history = log.restore().unwrap().history;
    assert_eq!(history.last(), Some(&big()));
    log.sync().unwrap();
}
