import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
    /// process. Setting it replaces any handler installed for those signals with
    /// `signal(2)`; a process that handles them itself should call `flushAndWait()` instead.
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

    private static let state = Mutex(State())
    /// The signal sources, kept alive for the life of the process.
    private static let sources = Locked<[any DispatchSourceSignal]>([])
    private static let queue = DispatchQueue(label: "ContextStack.TerminationFlusher")

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
    static func flushAll() {
        let stacks = state.withLock { $0.stacks.values.compactMap(\.stack) }
        for stack in stacks { try? stack.flushAndWait() }
    }

    private static func installHooks() {
        atexit { TerminationFlusher.flushAll() }
        for signalNumber in [SIGTERM, SIGINT] {
            // Dispatch sees the signal only once the default action is off.
            signal(signalNumber, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signalNumber, queue: queue)
            source.setEventHandler {
                flushAll()
                // Then end the process the way the signal would have.
                signal(signalNumber, SIG_DFL)
                raise(signalNumber)
            }
            source.resume()
            sources.withLock { $0.append(source) }
        }
    }
}

extension Stack {
    struct WeakStack: Sendable {
        weak var stack: Stack?
    }
}
