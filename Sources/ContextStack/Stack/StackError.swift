import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// A stack or context set up in a way that cannot work: thrown by `MainContext(…)`.
public struct StackError: Error, CustomStringConvertible, Sendable {
    /// What is wrong, as a value you can match.
    public struct Code: Hashable, Sendable {
        private enum Base: Hashable, Sendable { case unsupportedTopology }
        private let base: Base
        /// The update target or order does not fit the stack.
        public static let unsupportedTopology = Code(base: .unsupportedTopology)
    }

    public let code: Code
    public let message: String

    init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
