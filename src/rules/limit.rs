//! Request rate and concurrency limits (nginx's limit_req and limit_conn): being written.
