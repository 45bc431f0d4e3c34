//! Every committed fuzz seed, including crashes kept as regression seeds, replayed through the
//! properties the fuzz targets check (src/fuzzing/): a fixed crash stays fixed on stable.

use std::path::Path;

fn replay(target: &str, check: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/seeds")
        .join(target);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let data = std::fs::read(&path).unwrap();
        let outcome = std::panic::catch_unwind(|| check(&data));
        assert!(outcome.is_ok(), "{} fails its property", path.display());
        count += 1;
    }
    assert!(count > 0, "no seeds in {}", dir.display());
}

#[test]
fn request_head_seeds() {
    replay("request_head", slipstream::fuzzing::request_head);
}

#[test]
fn response_head_seeds() {
    replay("response_head", slipstream::fuzzing::response_head);
}

#[test]
fn cache_entry_seeds() {
    replay("cache_entry", slipstream::fuzzing::cache_entry);
}

#[test]
fn chunked_seeds() {
    replay("chunked", slipstream::fuzzing::chunked);
}

#[test]
fn config_seeds() {
    replay("config", slipstream::fuzzing::config);
}

#[test]
fn accept_encoding_seeds() {
    replay("accept_encoding", slipstream::fuzzing::accept_encoding);
}

#[test]
fn compress_head_seeds() {
    replay("compress_head", slipstream::fuzzing::compress_head);
}

#[test]
fn fastcgi_records_seeds() {
    replay("fastcgi_records", slipstream::fuzzing::fastcgi_records);
}

#[test]
fn fastcgi_params_seeds() {
    replay("fastcgi_params", slipstream::fuzzing::fastcgi_params);
}

#[test]
fn cgi_head_seeds() {
    replay("cgi_head", slipstream::fuzzing::cgi_head);
}

#[test]
fn range_seeds() {
    replay("range", slipstream::fuzzing::range);
}

#[test]
fn static_path_seeds() {
    replay("static_path", slipstream::fuzzing::static_path);
}

#[test]
fn conditional_seeds() {
    replay("conditional", slipstream::fuzzing::conditional);
}

#[test]
fn log_format_seeds() {
    replay("log_format", slipstream::fuzzing::log_format);
}

#[test]
fn proc_files_seeds() {
    replay("proc_files", slipstream::fuzzing::proc_files);
}

#[test]
fn tls_pem_seeds() {
    replay("tls_pem", slipstream::fuzzing::tls_pem);
}

#[test]
fn ocsp_response_seeds() {
    replay("ocsp_response", slipstream::fuzzing::ocsp_response);
}

#[test]
fn http2_frames_seeds() {
    replay("http2_frames", slipstream::fuzzing::http2_frames);
}

#[test]
fn http2_server_seeds() {
    replay("http2_server", slipstream::fuzzing::http2_server);
}

#[test]
fn grpc_seeds() {
    replay("grpc", slipstream::fuzzing::grpc);
}

#[test]
fn http2_convert_seeds() {
    replay("http2_convert", slipstream::fuzzing::http2_convert);
}

#[test]
fn request_rules_seeds() {
    replay("request_rules", slipstream::fuzzing::request_rules);
}

#[test]
fn nginx_conf_seeds() {
    replay("nginx_conf", slipstream::fuzzing::nginx_conf);
}

#[test]
fn htpasswd_seeds() {
    replay("htpasswd", slipstream::fuzzing::htpasswd::htpasswd);
}

#[test]
fn proxy_protocol_seeds() {
    replay("proxy_protocol", slipstream::fuzzing::proxy_protocol);
}

#[test]
fn etcd_watch_seeds() {
    replay("etcd_watch", slipstream::fuzzing::etcd_watch);
}

#[test]
fn fleet_counts_seeds() {
    replay("fleet_counts", slipstream::fuzzing::fleet_counts);
}
