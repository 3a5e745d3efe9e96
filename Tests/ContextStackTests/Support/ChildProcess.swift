import _ContextStackCore
import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A child process started with `posix_spawn`, for the tests that run other programs
/// (`stress-writer`, the demo, PostgreSQL's `initdb` and `pg_ctl`).
///
/// Not Foundation's `Process`: on Linux, `Process.run()` reads each `/proc/self/fd` entry's
/// whole 256-byte `d_name` to find the descriptors to close in the child, and crashes when an
/// entry sits at the end of `readdir`'s buffer before an unmapped page
/// (swiftlang/swift-corelibs-foundation#5472, not in Swift 6.3.1's Foundation). A full test run
/// holds well over a thousand descriptors — every store's connections — and crashed there. Here
/// the child closes every descriptor above 2 with `posix_spawn_file_actions_addclosefrom_np`,
/// which reads nothing.
///
/// `Sendable`: the descriptors and the pid are immutable; the exit status is behind a lock.
final class ChildProcess: Sendable {
    /// Where one of the child's standard streams goes.
    enum Stream {
        /// A pipe whose other end the parent holds (`input`, `output`, `errors`).
        case pipe
        /// `/dev/null`.
        case null
        /// An open descriptor of the parent's (a log file); it is not closed here.
        case descriptor(Int32)
        /// Standard error only: wherever standard output goes.
        case output
    }

    let pid: pid_t
    /// The write end of the child's standard input, when it is a pipe.
    let input: FileHandle?
    /// The read end of the child's standard output, when it is a pipe.
    let output: FileHandle?
    /// The read end of the child's standard error, when it is a pipe.
    let errors: FileHandle?
    /// The wait status, once the child was reaped. Under the lock, so that `kill` never signals
    /// a pid that was reaped (and may belong to another process by then).
    private let reaped = Locked<Int32?>(nil)

    /// Starts `command[0]` (a path) with the rest as its arguments and this process's
    /// environment.
    init(_ command: [String], input inputStream: Stream = .null, output outputStream: Stream = .pipe, errors errorStream: Stream = .pipe) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // The parent's ends of the pipes, and the child's ends, closed here once it started.
        var parentEnds: [Int32?] = [nil, nil, nil]
        var childEnds: [Int32] = []
        defer { childEnds.forEach { close($0) } }
        func cleanUpAndThrow(_ message: String) -> ChildProcessError {
            parentEnds.compactMap { $0 }.forEach { close($0) }
            return ChildProcessError(message: message)
        }
        for (target, stream) in [(Int32(0), inputStream), (1, outputStream), (2, errorStream)] {
            switch stream {
            case .pipe:
                var ends: [Int32] = [0, 0]
                guard Self.pipe2(&ends, O_CLOEXEC) == 0 else { throw cleanUpAndThrow("pipe2 failed: \(String(cString: strerror(errno)))") }
                // Standard input: the child reads end 0; the others: the child writes end 1.
                let (child, parent) = target == 0 ? (ends[0], ends[1]) : (ends[1], ends[0])
                childEnds.append(child)
                parentEnds[Int(target)] = parent
                posix_spawn_file_actions_adddup2(&actions, child, target)
            case .null:
                posix_spawn_file_actions_addopen(&actions, target, "/dev/null", target == 0 ? O_RDONLY : O_WRONLY, 0)
            case .descriptor(let descriptor):
                posix_spawn_file_actions_adddup2(&actions, descriptor, target)
            case .output:
                precondition(target == 2, "only standard error can go where standard output goes")
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
            }
        }
        _ = Self.addCloseFrom(&actions, 3)
        // The child starts with no signal blocked and every signal's default action, whatever
        // the spawning thread had.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        var all = sigset_t()
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let argv: [UnsafeMutablePointer<CChar>?] = command.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = posix_spawn(&pid, command[0], &actions, &attributes, argv, environ)
        guard spawned == 0 else { throw cleanUpAndThrow("could not run \(command[0]): \(String(cString: strerror(spawned)))") }
        self.pid = pid
        input = parentEnds[0].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        output = parentEnds[1].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
        errors = parentEnds[2].map { FileHandle(fileDescriptor: $0, closeOnDealloc: true) }
    }

    // glibc's `pipe2` and `posix_spawn_file_actions_addclosefrom_np` (2.34) are GNU
    // extensions that Swift's Glibc module does not import: found by name instead.
    private static let pipe2 = glibcFunction("pipe2", as: (@convention(c) (UnsafeMutablePointer<Int32>, Int32) -> Int32).self)
    private static let addCloseFrom = glibcFunction("posix_spawn_file_actions_addclosefrom_np",
                                                    as: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)

    private static func glibcFunction<F>(_ name: String, as type: F.Type) -> F {
        guard let symbol = dlsym(nil, name) else { preconditionFailure("glibc has no \(name): the tests need glibc 2.34 or later") }
        return unsafeBitCast(symbol, to: type)
    }

    /// Sends `signal` to the child, unless it was reaped already.
    func kill(_ signal: Int32 = SIGKILL) {
        reaped.withLock { status in
            if status == nil { _ = Glibc.kill(pid, signal) }
        }
    }

    /// Waits until the child exits; returns its wait status.
    @discardableResult
    func waitUntilExit() -> Int32 {
        if let status = reaped.withLock({ $0 }) { return status }
        // Wait without reaping, so that `kill` under the lock still finds the pid the child's.
        var info = siginfo_t()
        while waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        return reaped.withLock { reaped in
            if let status = reaped { return status }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            reaped = status
            return status
        }
    }

    /// Whether the child has exited (it is reaped if so).
    var isRunning: Bool {
        reaped.withLock { reaped in
            guard reaped == nil else { return false }
            var status: Int32 = 0
            guard waitpid(pid, &status, WNOHANG) == pid else { return true }
            reaped = status
            return false
        }
    }

    /// The signal that ended the child, or nil when it exited by itself (or is running).
    var terminationSignal: Int32? {
        guard let status = reaped.withLock({ $0 }), status & 0x7f != 0 else { return nil }
        return status & 0x7f
    }

    /// The child's exit code, or nil when a signal ended it (or it is running).
    var exitCode: Int32? {
        guard let status = reaped.withLock({ $0 }), status & 0x7f == 0 else { return nil }
        return (status >> 8) & 0xff
    }
}

struct ChildProcessError: Error, CustomStringConvertible {
    let message: String
    var description: String { message }
}

/// Limits the size of every file this process writes from now on (`RLIMIT_FSIZE`), writing
/// past it failing with `EFBIG` instead of ending the process (`SIGXFSZ` ignored): a disk that
/// fills up, for tests that run in a child process. False when the limit could not be set.
func limitFileSizes(to bytes: Int) -> Bool {
    signal(SIGXFSZ, SIG_IGN)
    var limit = rlimit()
    #if canImport(Glibc)
    let resource = __rlimit_resource_t(RLIMIT_FSIZE.rawValue)
    #else
    let resource = RLIMIT_FSIZE
    #endif
    guard getrlimit(resource, &limit) == 0 else { return false }
    limit.rlim_cur = rlim_t(bytes)
    return setrlimit(resource, &limit) == 0
}
