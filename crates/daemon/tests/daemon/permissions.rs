//! Permissions and namespaces: what the daemon shows each caller, against its own /proc.

use crate::harness::*;
