// node:async_hooks for the browser, as bundlers stub it: @langchain/core's context module
// imports AsyncLocalStorage at load time; the SDK's client never runs it.
export class AsyncLocalStorage {
  getStore() {
    return undefined;
  }
  run(_store, callback, ...args) {
    return callback(...args);
  }
}
