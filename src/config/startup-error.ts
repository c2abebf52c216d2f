// A start that cannot go on for a reason the operator fixes (the data directory, the port): the
// process says why in one line and exits with status 2, as for a bad setting. A stack trace
// would not help.
export class StartupError extends Error {}
