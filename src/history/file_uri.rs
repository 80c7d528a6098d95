//! Lexical normalisation of paths and `file://` URIs, for exact workspace
//! matching.
//!
//! Matching a cwd to a recorded workspace must be exact: a parent, a child or
//! the root must never pass for the directory itself. So both sides are
//! brought to one spelling, lexically (the filesystem is never consulted, so
//! symlinks are not resolved), and then compared with `==`. Anything that
//! cannot be brought to a spelling without guessing is rejected: the caller
//! then treats it as matching nothing.

use std::path::{Component, Path, PathBuf};

/// Normalise an absolute path lexically: repeated separators collapse, `.`
/// disappears, `..` removes the previous component (and stays at the root),
/// and a trailing separator is dropped. `None` if the path is not absolute.
pub fn normalize_path(path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                // `pop` refuses to remove the root, which is what `/..` means.
                out.pop();
            }
            Component::Normal(name) => out.push(name),
        }
    }
    Some(out)
}

/// Convert a local `file://` URI to a normalised absolute path.
///
/// Accepted: `file:///p`, `file://localhost/p` (host compared without case),
/// and `file:/p`, with percent-escapes decoded and any query or fragment
/// dropped. Rejected (`None`): other schemes, other hosts, malformed
/// escapes, escapes that decode to `/` or NUL (they would change the path's
/// structure), and paths that are not absolute.
pub fn file_uri_to_path(uri: &str) -> Option<PathBuf> {
    let scheme_len = "file:".len();
    let scheme = uri.get(..scheme_len)?;
    if !scheme.eq_ignore_ascii_case("file:") {
        return None;
    }
    let rest = &uri[scheme_len..];
    let path_part = if let Some(after_slashes) = rest.strip_prefix("//") {
        let authority_end = after_slashes.find('/')?;
        let authority = &after_slashes[..authority_end];
        if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
            return None;
        }
        &after_slashes[authority_end..]
    } else if rest.starts_with('/') {
        rest
    } else {
        return None;
    };
    let path_part = match path_part.find(['?', '#']) {
        Some(end) => &path_part[..end],
        None => path_part,
    };
    let bytes = percent_decode(path_part)?;
    normalize_path(&path_from_bytes(bytes)?)
}

/// Decode `%XX` escapes. `None` on a malformed escape or on an escaped `/`
/// or NUL.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let raw = s.as_bytes();
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = hex_value(*raw.get(i + 1)?)?;
            let lo = hex_value(*raw.get(i + 2)?)?;
            let byte = hi << 4 | lo;
            if byte == b'/' || byte == 0 {
                return None;
            }
            out.push(byte);
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(unix)]
fn path_from_bytes(bytes: Vec<u8>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: Vec<u8>) -> Option<PathBuf> {
    String::from_utf8(bytes).ok().map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(s: &str) -> Option<PathBuf> {
        file_uri_to_path(s)
    }

    #[test]
    fn spellings_of_one_directory_agree() {
        let want = Some(PathBuf::from("/home/a b/proj"));
        for s in [
            "file:///home/a%20b/proj",
            "file:///home/a%20b/proj/",
            "file://localhost/home/a%20b/proj",
            "FILE://LOCALHOST/home/a%20b/proj//",
            "file:///home/./a%20b/x/../proj",
            "file:/home/a%20b/proj",
            "file:///home/a%20b/proj?x=1#frag",
        ] {
            assert_eq!(uri(s), want, "{s}");
        }
    }

    #[test]
    fn root_stays_root() {
        assert_eq!(uri("file:///"), Some(PathBuf::from("/")));
        assert_eq!(uri("file:///.."), Some(PathBuf::from("/")));
        assert_eq!(
            normalize_path(Path::new("/a/../..")),
            Some(PathBuf::from("/"))
        );
    }

    #[test]
    fn rejects_what_it_cannot_read_unambiguously() {
        for s in [
            "http:///x",
            "file://otherhost/x",
            "file:///a%2Fb",
            "file:///a%00b",
            "file:///a%zz",
            "file:///a%4",
            "file:relative",
            "file://",
            "",
            "fi",
        ] {
            assert_eq!(uri(s), None, "{s}");
        }
        assert_eq!(normalize_path(Path::new("relative/x")), None);
    }

    #[test]
    fn multibyte_escapes_decode_to_utf8() {
        assert_eq!(uri("file:///tmp/%E6%97%A5"), Some(PathBuf::from("/tmp/日")));
        // Unescaped non-ASCII is taken as is.
        assert_eq!(uri("file:///tmp/日"), Some(PathBuf::from("/tmp/日")));
    }
}
