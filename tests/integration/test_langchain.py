"""LangChain's ChatOpenAI against reame: with_structured_output and bind_tools (optional dependency)."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from tests.harness import Server

pytestmark = pytest.mark.integration
langchain_openai = pytest.importorskip("langchain_openai")


class Colour(BaseModel):
    """A colour of the rainbow."""

    name: Literal["red", "orange", "yellow", "green", "blue", "indigo", "violet"]
    position: int = Field(ge=1, le=7)


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
    """Get the current weather in a city."""
    return f"18 degrees {unit} in {city}"


def chat(server: Server) -> object:
    return langchain_openai.ChatOpenAI(
        base_url=server.base_url, api_key="unused", model="any", temperature=0, max_tokens=80, max_retries=0,
    )


def test_with_structured_output_returns_the_model(server: Server) -> None:
    structured = chat(server).with_structured_output(Colour)  # type: ignore[attr-defined]
    colour = structured.invoke("Name the first colour of the rainbow.")
    assert isinstance(colour, Colour) and 1 <= colour.position <= 7


def test_bind_tools_with_a_forced_call_gives_tool_calls(server: Server) -> None:
    model = chat(server).bind_tools([get_weather], tool_choice="get_weather")  # type: ignore[attr-defined]
    message = model.invoke("What is the weather in Paris?")
    assert message.tool_calls  # one or more: parallel_tool_calls defaults to true
    for call in message.tool_calls:
        assert call["name"] == "get_weather" and call["id"].startswith("call_")
        assert set(call["args"]) == {"city", "unit"} and call["args"]["unit"] in ("celsius", "fahrenheit")


def retrieved(name: str, trade: str) -> str:
    """A retrieved document of two long paragraphs."""
    return "\n\n".join(
        f"The {name} ledger, part {n}: every {trade} order placed before noon is confirmed within {n + 2} hours, "
        f"and prices for {trade} are reviewed each quarter and published at least {n + 10} days before they "
        f"apply. Complaints about {trade} go to the {name} office, which answers within {n + 5} working days."
        for n in range(1, 3)
    )


def test_retrieved_documents_sent_as_parts_are_reused_in_another_order(server: Server) -> None:
    """A RAG chain that sends each retrieved document as a text part gets chunk mode (cache.chunks = parts)."""
    from langchain_core.messages import HumanMessage, SystemMessage

    docs = {"mill": retrieved("mill", "flour"), "dairy": retrieved("dairy", "cheese")}

    def ask(order: tuple[str, ...], question: str) -> object:
        parts: list[str | dict[str, str]] = [{"type": "text", "text": docs[name] + "\n\n"} for name in order]
        parts.append({"type": "text", "text": question})
        messages = [SystemMessage("Answer from the documents."), HumanMessage(content=parts)]
        return chat(server).invoke(messages)  # type: ignore[attr-defined]

    ask(("mill", "dairy"), "How soon are flour orders confirmed?")
    reply = ask(("dairy", "mill"), "Who answers complaints about cheese?")
    usage = reply.usage_metadata  # type: ignore[attr-defined]
    assert usage["input_token_details"]["cache_read"] > usage["input_tokens"] // 2, usage
