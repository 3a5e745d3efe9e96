import _ContextStackCore
import _ContextStackModel
import _ContextStackSQLite

/// Where an update's `commit()` saves to: the topology, chosen when a context is created.
public enum UpdateTarget: Sendable, Hashable {
    /// Three-tier: update → main context → root → store. When `commit()` returns, the main
    /// context sees the change; the root writes it to SQLite in the background.
    case mainContext
    /// Two-tier: update → root → store; with `autoMerge` the main context merges the root's saves.
    case rootContext(autoMerge: Bool)
    /// Update → store: `commit()` writes SQLite before it returns.
    case persistentStore
}

/// How updates started from one context are ordered.
public enum UpdateOrder: Sendable, Hashable {
    /// Each update runs in its own context, concurrently with the others.
    case `default`
    /// One update at a time per context.
    case serial
}
