//! seccomp: a focused deny-list compiled to BPF programs in the parent (the child only installs
//! them).

use std::collections::BTreeMap;

use seccompiler::{
    SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
    TargetArch,
};

use crate::SandboxError;

/// The system calls denied with `EPERM` whatever their arguments.
const DENIED: [libc::c_long; 18] = [
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_bpf,
    libc::SYS_perf_event_open,
    libc::SYS_userfaultfd,
    libc::SYS_io_uring_setup,
    libc::SYS_io_uring_enter,
    libc::SYS_io_uring_register,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_keyctl,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_kexec_load,
];

/// `clone` flags creating namespaces (a user namespace gives capabilities inside it).
const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWCGROUP,
];

/// The seccomp programs, compiled; installed in this order (for two denials of one call,
/// the errno of the program installed last wins).
pub(super) fn programs(network: bool) -> Result<Vec<Vec<libc::sock_filter>>, SandboxError> {
    let failed = |e: seccompiler::BackendError| SandboxError::setup("seccomp filter", e);
    let cond = |arg: u8, op: SeccompCmpOp, value: u64| {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value).map_err(failed)
    };
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(failed)?;

    let mut denied: BTreeMap<i64, Vec<SeccompRule>> =
        DENIED.iter().map(|&nr| (nr, Vec::new())).collect();
    let mut clone_rules = Vec::new();
    for flag in NAMESPACE_FLAGS {
        let flag = u64::from(flag.cast_unsigned());
        clone_rules.push(
            SeccompRule::new(vec![cond(0, SeccompCmpOp::MaskedEq(flag), flag)?]).map_err(failed)?,
        );
    }
    denied.insert(libc::SYS_clone, clone_rules);
    let mut programs = vec![compile(denied, libc::EPERM, arch)?];

    if !network {
        let unix = u64::from(libc::AF_UNIX.cast_unsigned());
        let rule = SeccompRule::new(vec![cond(0, SeccompCmpOp::Ne, unix)?]).map_err(failed)?;
        programs.push(compile(
            BTreeMap::from([(libc::SYS_socket, vec![rule])]),
            libc::EACCES,
            arch,
        )?);
    }
    programs.push(compile(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        libc::ENOSYS,
        arch,
    )?);
    #[cfg(target_arch = "x86_64")]
    programs.push(x32_guard());
    Ok(programs)
}

fn compile(
    rules: BTreeMap<i64, Vec<SeccompRule>>,
    errno: libc::c_int,
    arch: TargetArch,
) -> Result<Vec<libc::sock_filter>, SandboxError> {
    let failed = |e: seccompiler::BackendError| SandboxError::setup("seccomp filter", e);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(errno.cast_unsigned()),
        arch,
    )
    .map_err(failed)?;
    let program = seccompiler::BpfProgram::try_from(filter).map_err(failed)?;
    Ok(program
        .into_iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect())
}

/// Denies x32 system calls (numbers with bit 30 set, same audit arch as x86_64), which
/// would otherwise slip past rules written for x86_64 numbers.
#[cfg(target_arch = "x86_64")]
fn x32_guard() -> Vec<libc::sock_filter> {
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let stmt = |code: u32, k: u32| libc::sock_filter {
        code: code as u16,
        jt: 0,
        jf: 0,
        k,
    };
    vec![
        // Load seccomp_data.nr (offset 0).
        stmt(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS, 0),
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        stmt(
            libc::BPF_RET | libc::BPF_K,
            libc::SECCOMP_RET_ERRNO | libc::ENOSYS.cast_unsigned(),
        ),
        stmt(libc::BPF_RET | libc::BPF_K, libc::SECCOMP_RET_ALLOW),
    ]
}
