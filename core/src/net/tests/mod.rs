//! The rules' and addresses' tables. The decisions and the proxy are tested in the sandbox.

mod addr;
mod rules;
