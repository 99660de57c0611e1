//! Exclusive or shared: the one word of lock vocabulary every layer uses,
//! from the kernel's table (platform) to the command line, so it lives
//! below all of them.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockMode {
    Exclusive,
    Shared,
}

impl LockMode {
    pub fn as_str(self) -> &'static str {
        match self {
            LockMode::Exclusive => "exclusive",
            LockMode::Shared => "shared",
        }
    }
}
