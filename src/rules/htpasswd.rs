//! htpasswd files and HTTP Basic credentials (nginx's auth_basic): being written.
