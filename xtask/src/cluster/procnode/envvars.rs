//! `$(VAR)` expansion in env values, command and args, as the kubelet does it.

use std::collections::BTreeMap;

/// Expands `$(NAME)` with `vars`; `$$` is a literal `$`; a reference to an
/// unknown name, or an unterminated one, is left as written.
pub fn expand(input: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(input.len());
    let bytes = input.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                    continue;
                }
                b'(' => {
                    if let Some(end) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + end];
                        match vars.get(name) {
                            Some(v) => out.push_str(v),
                            None => out.push_str(&input[i..i + 3 + end]),
                        }
                        i += 3 + end;
                        continue;
                    }
                }
                _ => {}
            }
        }
        let ch = input[i..].chars().next().unwrap_or('\u{fffd}');
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

/// Resolves a container's env in order: each value may refer to the ones
/// before it (and to `base`, the image's and the agent's variables).
pub fn resolve_in_order(
    base: &[(String, String)],
    ordered: &[(String, String)],
) -> Vec<(String, String)> {
    let mut vars: BTreeMap<String, String> = base.iter().cloned().collect();
    let mut out: Vec<(String, String)> = base.to_vec();
    for (name, raw) in ordered {
        let value = expand(raw, &vars);
        vars.insert(name.clone(), value.clone());
        out.retain(|(n, _)| n != name);
        out.push((name.clone(), value));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expands_known_and_keeps_unknown() {
        let v = vars(&[("POD_IP", "127.10.0.1"), ("A", "x")]);
        assert_eq!(
            expand("listen_addresses=$(POD_IP)", &v),
            "listen_addresses=127.10.0.1"
        );
        assert_eq!(expand("$(A)$(A)-$(B)", &v), "xx-$(B)");
        assert_eq!(expand("$$(A) $$ $", &v), "$(A) $ $");
        assert_eq!(expand("$(A", &v), "$(A");
        assert_eq!(expand("é$(A)ü", &v), "éxü");
    }

    #[test]
    fn env_refers_to_earlier_entries_only() {
        let base = vec![("PATH".to_string(), "/bin".to_string())];
        let ordered = vec![
            ("B".to_string(), "$(A)-b".to_string()),
            ("A".to_string(), "a".to_string()),
            ("C".to_string(), "$(A)-$(PATH)".to_string()),
            ("PATH".to_string(), "/usr/bin:$(PATH)".to_string()),
        ];
        let out = resolve_in_order(&base, &ordered);
        let get = |k: &str| out.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("B"), Some("$(A)-b"));
        assert_eq!(get("C"), Some("a-/bin"));
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert_eq!(out.iter().filter(|(n, _)| n == "PATH").count(), 1);
    }
}
