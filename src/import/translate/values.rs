//! nginx's value syntax in slipstream's terms: times (`60`, `1m`, `1h30m`) as duration
//! strings, sizes (`10m`, `512k`), regex escaping for generated rules, and which directives
//! have no meaning for slipstream (with the reason) or are known but not supported yet.

use super::super::syntax::Directive;

/// An nginx time (`60` seconds, `500ms`, `1m`, `1h30m`, `2d`) as a slipstream duration
/// (`"60s"`, `"500ms"`, `"1m"`, `"90m"`, `"48h"`): the largest unit that divides it.
pub(super) fn duration(text: &str) -> Option<String> {
    let ms = time_ms(text)?;
    Some(if ms % 3_600_000 == 0 && ms > 0 {
        format!("{}h", ms / 3_600_000)
    } else if ms % 60_000 == 0 && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    })
}

/// An nginx time in milliseconds (`ngx_parse_time`: number-unit pairs, a bare number is
/// seconds).
pub(super) fn time_ms(text: &str) -> Option<u64> {
    crate::rules::expires::nginx_time_ms(text)
}

/// An nginx size (`10m`, `512k`, `1G`, `0`) as slipstream writes it (`"10m"`, `"512k"`,
/// `"1g"`, `"0"`), and its value in bytes.
pub(super) fn size(text: &str) -> Option<(String, u64)> {
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let n: u64 = text[..digits].parse().ok()?;
    let unit = text[digits..].to_ascii_lowercase();
    let mult: u64 = match unit.as_str() {
        "" => 1,
        "k" => 1 << 10,
        "m" => 1 << 20,
        "g" => 1 << 30,
        _ => return None,
    };
    Some((format!("{n}{unit}"), n.checked_mul(mult)?))
}

/// `text` with every regex metacharacter escaped, to match it literally.
pub(super) fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why `d` means nothing for slipstream, when it does not (it is then left out silently).
pub(super) fn ignored(d: &Directive) -> Option<&'static str> {
    let name = d.name.as_str();
    let reason = match name {
        "worker_processes"
        | "worker_connections"
        | "worker_rlimit_nofile"
        | "multi_accept"
        | "use"
        | "accept_mutex"
        | "accept_mutex_delay"
        | "events"
        | "worker_cpu_affinity"
        | "worker_priority"
        | "thread_pool"
        | "timer_resolution"
        | "pcre_jit" => "slipstream sizes its workers itself",
        "pid" | "lock_file" => "nginx's own file",
        "user" | "daemon" | "master_process" => "set by the service unit",
        "load_module" => "slipstream has no dynamic modules",
        "sendfile"
        | "tcp_nopush"
        | "tcp_nodelay"
        | "aio"
        | "directio"
        | "postpone_output"
        | "reset_timedout_connection"
        | "lingering_close"
        | "lingering_time"
        | "lingering_timeout"
        | "keepalive_disable"
        | "send_lowat" => "slipstream sets its sockets up itself",
        "proxy_buffering"
        | "proxy_request_buffering"
        | "proxy_max_temp_file_size"
        | "fastcgi_buffering"
        | "fastcgi_request_buffering"
        | "fastcgi_max_temp_file_size"
        | "fastcgi_keep_conn" => "slipstream streams bodies without disk buffers",
        "server_tokens" => "slipstream's Server field has no version",
        "types" => "slipstream has a built-in types map ([files] types)",
        "ssl_session_cache" | "ssl_session_timeout" => {
            "slipstream keeps TLS sessions itself ([tls] resumption)"
        }
        "ssl_prefer_server_ciphers"
        | "ssl_ciphers"
        | "ssl_ecdh_curve"
        | "ssl_dhparam"
        | "proxy_ssl_protocols"
        | "proxy_ssl_ciphers" => "rustls's cipher suites are fixed",
        "proxy_ssl_server_name" => "slipstream sends SNI to TLS upstreams itself",
        "gzip_vary" | "gzip_proxied" | "gzip_comp_level" | "gzip_types" | "gzip_min_length"
        | "gzip_http_version" | "gzip_disable" | "brotli_comp_level" | "brotli_types"
        | "brotli_min_length" => "slipstream's [compression] settings apply",
        "gzip_static" | "brotli_static" => "slipstream serves precompressed files itself",
        "http2" => "slipstream offers HTTP/2 on TLS listeners itself",
        "open_file_cache"
        | "open_file_cache_valid"
        | "open_file_cache_min_uses"
        | "open_file_cache_errors"
        | "open_log_file_cache" => "slipstream keeps its own open-file cache ([files])",
        "autoindex_exact_size" | "autoindex_localtime" | "autoindex_format" => {
            "slipstream's listing shows rounded sizes and UTC times (exact on hover), and JSON to Accept: application/json"
        }
        "log_not_found" => "slipstream does not log missing files",
        "resolver_timeout" => "slipstream's resolver has its own timeout",
        "fastcgi_split_path_info" => "slipstream splits PATH_INFO after .php itself",
        "server_name_in_redirect" if arg_is(d, "off") => "nginx's default",
        "proxy_redirect" if arg_is(d, "off") => "slipstream does not rewrite Location",
        "proxy_http_version" if arg_is(d, "1.1") => "slipstream speaks HTTP/1.1 to upstreams",
        _ if is_buffer_size(name) => "slipstream sizes its buffers itself",
        _ if name.ends_with("_hash_max_size") || name.ends_with("_hash_bucket_size") => {
            "nginx's hash table sizes"
        }
        _ if name.ends_with("_temp_path") => "slipstream never buffers bodies to disk",
        _ => return None,
    };
    Some(reason)
}

/// Whether `name` sizes buffers (`*_buffer_size`, `*_buffers`, `*_buffers_size`).
fn is_buffer_size(name: &str) -> bool {
    name.ends_with("_buffer_size") || name.ends_with("_buffers") || name.ends_with("_buffers_size")
}

/// Whether `d` has exactly one argument, `value`.
fn arg_is(d: &Directive, value: &str) -> bool {
    d.args.len() == 1 && d.args[0] == value
}

/// nginx directives slipstream may take one day: reported as "not supported yet" rather than
/// "unknown directive".
const UNSUPPORTED: &[&str] = &[
    "recursive_error_pages",
    "proxy_pass_header",
    "proxy_redirect",
    "proxy_next_upstream",
    "proxy_next_upstream_tries",
    "proxy_next_upstream_timeout",
    "proxy_method",
    "proxy_pass_request_body",
    "proxy_pass_request_headers",
    "proxy_set_body",
    "proxy_http_version",
    "proxy_bind",
    "proxy_socket_keepalive",
    "fastcgi_pass_header",
    "fastcgi_next_upstream",
    "map",
    "set",
    "break",
    "limit_except",
    "limit_rate",
    "limit_rate_after",
    "sub_filter",
    "sub_filter_once",
    "sub_filter_types",
    "charset",
    "source_charset",
    "charset_types",
    "etag",
    "if_modified_since",
    "merge_slashes",
    "underscores_in_headers",
    "ignore_invalid_headers",
    "port_in_redirect",
    "absolute_redirect",
    "server_name_in_redirect",
    "keepalive_requests",
    "keepalive_time",
    "mirror",
    "mirror_request_body",
    "split_clients",
    "geo",
    "secure_link",
    "secure_link_md5",
    "empty_gif",
    "ssl_stapling",
    "ssl_stapling_verify",
    "ssl_trusted_certificate",
    "ssl_client_certificate",
    "ssl_verify_client",
    "ssl_verify_depth",
    "ssl_crl",
    "ssl_session_tickets",
    "ssl_session_ticket_key",
    "ssl_early_data",
    "ssl_password_file",
    "ssl_conf_command",
    "ssl",
    "disable_symlinks",
    "log_subrequest",
    "max_ranges",
    "chunked_transfer_encoding",
    "add_trailer",
    "uwsgi_pass",
    "scgi_pass",
    "memcached_pass",
    "http2_max_concurrent_streams",
    "http2_recv_buffer_size",
    "http2_chunk_size",
    "http3",
    "quic_retry",
    "client_body_in_file_only",
    "client_body_in_single_buffer",
    "env",
    "worker_shutdown_timeout",
    "stream",
    "mail",
    "dav_methods",
    "mp4",
    "flv",
    "image_filter",
    "ssi",
    "addition_types",
    "userid",
];

/// Prefixes of nginx directive families slipstream does not support yet.
const UNSUPPORTED_PREFIXES: &[&str] = &[
    "proxy_cache",
    "proxy_cookie_",
    "proxy_store",
    "proxy_ssl_",
    "fastcgi_cache",
    "uwsgi_",
    "scgi_",
    "grpc_",
    "ssi_",
    "geoip_",
    "js_",
    "perl",
    "xslt_",
    "sub_filter",
    "auth_",
];

/// Whether nginx has `name` (as far as the translation knows) though slipstream does not
/// take it yet.
pub(super) fn known_unsupported(name: &str) -> bool {
    UNSUPPORTED.contains(&name) || UNSUPPORTED_PREFIXES.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_times_and_sizes_become_slipstream_values() {
        assert_eq!(duration("60").as_deref(), Some("1m"));
        assert_eq!(duration("65").as_deref(), Some("65s"));
        assert_eq!(duration("65s").as_deref(), Some("65s"));
        assert_eq!(duration("1h30m").as_deref(), Some("90m"));
        assert_eq!(duration("1h 30m").as_deref(), Some("90m"));
        assert_eq!(duration("500ms").as_deref(), Some("500ms"));
        assert_eq!(duration("1500ms").as_deref(), Some("1500ms"));
        assert_eq!(duration("2d").as_deref(), Some("48h"));
        assert_eq!(duration("0").as_deref(), Some("0s"));
        assert_eq!(duration("1x"), None);
        assert_eq!(duration("s"), None);
        assert_eq!(time_ms("1M"), Some(30 * 86_400_000));
        assert_eq!(size("10M"), Some(("10m".into(), 10 << 20)));
        assert_eq!(size("512k"), Some(("512k".into(), 512 << 10)));
        assert_eq!(size("0"), Some(("0".into(), 0)));
        assert_eq!(size("1.5m"), None);
        assert_eq!(regex_escape("/a.b+(c)/"), "/a\\.b\\+\\(c\\)/");
    }
}
