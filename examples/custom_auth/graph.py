"""The custom auth example's graph: a node that answers on behalf of the signed-in user.

The server puts the user in ``config["configurable"]["langgraph_auth_user"]`` (attribute and
dict access: ``user.identity``, ``user["display_name"]``), with ``langgraph_auth_user_id`` and
``langgraph_auth_permissions`` beside it; LangGraph's ``Runtime.server_info.user`` is the same.
"""

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.runtime import Runtime


def greet(state: MessagesState, config: RunnableConfig, runtime: Runtime) -> dict:
    configurable = config["configurable"]
    user = configurable["langgraph_auth_user"]
    said = state["messages"][-1].content if state["messages"] else ""
    server_user = (
        runtime.server_info.user.identity if runtime.server_info and runtime.server_info.user else None
    )
    permissions = ",".join(configurable.get("langgraph_auth_permissions") or [])
    reply = (
        f"hello {user['display_name']} ({user.identity}; server_info {server_user}; "
        f"id {configurable['langgraph_auth_user_id']}; permissions {permissions}): {said}"
    )
    return {"messages": [AIMessage(reply)]}


graph = StateGraph(MessagesState).add_node(greet).add_edge(START, "greet").compile()
