//! Reading operators' nginx configs, for `slipstream import` (issue 33): nginx's syntax
//! read as nginx reads it ([`syntax`]), the files a config includes ([`read`]), and what the
//! directives mean as slipstream's TOML ([`translate`], with a note for each directive left
//! out). Nothing on the request path uses this module.

pub mod read;
pub mod syntax;
pub mod translate;

pub use read::{read_config, Config, ReadError};
pub use syntax::{parse, Directive, SyntaxError};
pub use translate::{translate, Note, NoteKind, Translation};
