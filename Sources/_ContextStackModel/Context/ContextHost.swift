import _ContextStackCore

/// What a context needs from the stack that made it: the model, the store, and somewhere to
/// report the errors no caller can catch (a failed read inside a property accessor).
///
/// `Stack` is the one conformer. The protocol is what keeps the contexts below the stack
/// API: `ContextCore` lives in this target and cannot name `Stack`, which lives above it.
package protocol ContextHost: AnyObject, Sendable {
    /// The resolved model every context of the stack shares.
    var graph: ModelGraph { get }
    /// Whether a store has been added yet (a context made before that pins nothing).
    var hasStore: Bool { get }
    /// The stack's store; a precondition failure naming the fix when there is none.
    var store: any ObjectStore { get }
    /// Hands an error to the stack's `onError`, if set.
    func report(_ error: any Error)
}
