//! Reading operators' nginx configs, for `slipstream import` (issue 33): nginx's syntax
//! read as nginx reads it ([`syntax`]) and the files a config includes ([`read`]). Nothing
//! on the request path uses this module; what a config means is translated from the
//! directives it gives.

pub mod read;
pub mod syntax;

pub use read::{read_config, Config, ReadError};
pub use syntax::{parse, Directive, SyntaxError};
