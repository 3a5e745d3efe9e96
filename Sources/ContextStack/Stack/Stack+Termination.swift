import Dispatch
import Foundation
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

extension Stack {
    /// Whether pending root writes are flushed when the process ends normally (`exit`, the end
    /// of `main`) or on SIGTERM or SIGINT — the server and command-line form of saving when an
    /// app goes to the background. Off by default.
    ///
    /// For example:
    ///
    /// ```swift
    /// stack.flushesOnTermination = true
    /// ```
    ///
    /// On SIGTERM and SIGINT the stack flushes, then the signal's default action ends the
    /// process. Setting it installs handlers for those signals (replacing any the process had);
    /// a process that handles them itself should call `flushAndWait()` in its own handler
    /// instead.
    public var flushesOnTermination: Bool {
        get { TerminationFlusher.contains(self) }
        set { newValue ? TerminationFlusher.add(self) : TerminationFlusher.remove(self) }
    }
}

/// The stacks to flush when the process ends, and the hooks that do it.
enum TerminationFlusher {
    private struct State {
        var stacks: [ObjectIdentifier: Stack.WeakStack] = [:]
        var isInstalled = false
    }

    private static let state = Locked(State())

    static func contains(_ stack: Stack) -> Bool {
        state.withLock { $0.stacks[ObjectIdentifier(stack)]?.stack != nil }
    }

    static func add(_ stack: Stack) {
        let install = state.withLock { state -> Bool in
            state.stacks[ObjectIdentifier(stack)] = Stack.WeakStack(stack: stack)
            defer { state.isInstalled = true }
            return !state.isInstalled
        }
        if install { installHooks() }
    }

    static func remove(_ stack: Stack) {
        _ = state.withLock { $0.stacks.removeValue(forKey: ObjectIdentifier(stack)) }
    }

    /// Flushes every registered stack; errors were already reported to `onError`.
    ///
    /// Other threads may go on committing while the process winds down, each commit's caller
    /// answered once it is handed over: a stack is flushed again until a flush finds nothing
    /// handed over meanwhile — at most sixteen times, so that a thread that never stops
    /// committing cannot hold the exit up for ever (`flush(_:rounds:)`).
    static func flushAll() {
        let stacks = state.withLock { $0.stacks.values.compactMap(\.stack) }
        for stack in stacks { flush(stack) }
    }

    static func flush(_ stack: Stack, rounds: Int = 16) {
        guard stack.hasStore else { return }
        for _ in 0..<rounds {
            let handedOver = stack.store.submittedCount
            try? stack.flushAndWait()
            if stack.store.submittedCount == handedOver { return }
        }
    }

    private static func installHooks() {
        atexit { TerminationFlusher.flushAll() }
        // A signal handler may only do async-signal-safe work: it writes the signal number to a
        // pipe, and a thread of ours does the flushing, then re-raises with the default action.
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { return }
        signalPipe = fds[1]
        let readEnd = fds[0]
        let thread = Thread {
            // Dispatch's threads block signals, and threads inherit their creator's mask: make
            // sure at least this one can take SIGTERM and SIGINT.
            var set = sigset_t()
            sigemptyset(&set)
            sigaddset(&set, SIGTERM)
            sigaddset(&set, SIGINT)
            pthread_sigmask(SIG_UNBLOCK, &set, nil)
            var number: UInt8 = 0
            while true {
                let count = read(readEnd, &number, 1)
                if count == 1 {
                    flushAll()
                    signal(Int32(number), SIG_DFL)
                    raise(Int32(number))
                } else if count < 0 && errno == EINTR {
                    continue  // the handler ran on this thread
                } else {
                    return
                }
            }
        }
        thread.name = "ContextStack.TerminationFlusher"
        thread.start()
        for signalNumber in [SIGTERM, SIGINT] {
            var action = sigaction()
            #if canImport(Glibc) || canImport(Musl)
            action.__sigaction_handler.sa_handler = { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(TerminationFlusher.signalPipe, &byte, 1)
            }
            #else
            action.__sigaction_u.__sa_handler = { number in
                var byte = UInt8(truncatingIfNeeded: number)
                _ = write(TerminationFlusher.signalPipe, &byte, 1)
            }
            #endif
            sigemptyset(&action.sa_mask)
            sigaction(signalNumber, &action, nil)
        }
    }

    /// The write end of the signal pipe: set once before the handlers are installed, then only
    /// read (by the signal handler, which may not take locks).
    nonisolated(unsafe) static var signalPipe: Int32 = -1
}

extension Stack {
    struct WeakStack: Sendable {
        weak var stack: Stack?
    }
}
