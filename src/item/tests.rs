use super::*;

#[test]
fn predicates() {
    assert!(Item::user_text("x").is_user_message());
    assert!(!Item::user_text("x").is_assistant_output());
    assert!(Item::assistant_text("x").is_assistant_output());
    assert!(Item::system_text("x").is_system_message());
    let call = Item::tool_call("c", "n", "{}");
    assert!(call.is_tool_call() && call.is_assistant_output());
    assert_eq!(call.call_id(), Some("c"));
}

#[test]
fn call_predicates_agree_with_the_call_link() {
    let opaque = |role: Option<Role>, json: &str| Item::Opaque {
        role,
        json: JsonText::parse(json).unwrap(),
    };
    let items = [
        Item::user_text("x"),
        Item::assistant_text("x"),
        Item::tool_call("c", "n", "{}"),
        Item::CustomToolCall {
            extra: Default::default(),
            id: None,
            call_id: "k".into(),
            name: "n".into(),
            input: String::new(),
            status: None,
        },
        Item::Reasoning {
            extra: Default::default(),
            id: None,
            text: "r".into(),
            summary: Vec::new(),
            encrypted_content: None,
            status: None,
        },
        Item::Thinking {
            extra: Default::default(),
            thinking: "t".into(),
            signature: None,
        },
        Item::ToolResult {
            extra: Default::default(),
            id: None,
            call_id: "c".into(),
            summary: String::new(),
            content: None,
        },
        Item::ToolOutput {
            extra: Default::default(),
            id: None,
            call_id: "c".into(),
            output: None,
            is_error: None,
            custom: false,
            status: None,
        },
        opaque(None, r#"{"type":"mcp_call","call_id":"m"}"#),
        opaque(None, r#"{"type":"shell_call_output","call_id":"m"}"#),
        opaque(None, r#"{"type":"web_search_call","id":"w"}"#),
        opaque(
            Some(Role::Assistant),
            r#"{"type":"server_tool_use","id":"s"}"#,
        ),
        opaque(
            Some(Role::User),
            r#"{"type":"web_search_tool_result","tool_use_id":"s"}"#,
        ),
        opaque(Some(Role::Assistant), r#"{"type":"text","id":"t"}"#),
    ];
    for item in &items {
        let link = item.call_link();
        assert_eq!(
            item.is_tool_call(),
            matches!(link, Some(CallLink::Call(_))),
            "{item:?}"
        );
        assert_eq!(
            item.is_tool_result(),
            matches!(link, Some(CallLink::Output(_))),
            "{item:?}"
        );
    }
    // Both sides of each kind occur, so a predicate that ignored its
    // side would fail above.
    assert_eq!(items.iter().filter(|i| i.is_tool_call()).count(), 4);
    assert_eq!(items.iter().filter(|i| i.is_tool_result()).count(), 4);
}

#[test]
fn runtime_json_uses_type_tag() {
    let json = serde_json::to_string(&Item::user_text("hi")).unwrap();
    assert_eq!(
        json,
        r#"{"type":"message","role":"user","content":[{"type":"text","text":"hi"}]}"#
    );
}
