"""What of a request is compressed: thresholds, roles, the final question, the tokens saved."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from reame.gateway.compress.messages import Policy, compress_messages, compress_prompt, split_question
from reame.shared.protocol import ChatMessage


def words(text: str) -> int:
    return len(text.split())


def policy(mode: str = "facts", min_tokens: int = 20) -> Policy:
    return Policy(mode, min_tokens, 30, words, 15)


FILLER = "We love our wonderful customers and our friendly team is simply the best in town!"
DOCUMENT = "\n\n".join([
    "## Prices",
    "Each loaf costs £3.10. " + FILLER,
    "We do not deliver on Sundays. " + FILLER,
    FILLER,
])


def test_short_contents_are_left_alone() -> None:
    messages = [ChatMessage("system", "<b>Be brief</b>, we love you!"), ChatMessage("user", "Hi?")]
    result = compress_messages(messages, policy(min_tokens=50))
    assert result.messages == messages and result.saved_tokens == 0


def test_long_contents_are_compressed_and_the_saving_counted() -> None:
    messages = [ChatMessage("system", DOCUMENT), ChatMessage("user", "When is there no delivery?")]
    result = compress_messages(messages, policy())
    assert result.messages is not None
    system, user = result.messages
    assert system.content == "## Prices\n\nEach loaf costs £3.10.\n\nWe do not deliver on Sundays."
    assert user == messages[1]
    assert result.saved_tokens == words(DOCUMENT) - words(system.content) > 0


def test_off_sends_everything_as_it_is() -> None:
    messages = [ChatMessage("system", DOCUMENT)]
    assert compress_messages(messages, policy("off")).messages == messages


def test_assistant_turns_are_never_compressed() -> None:
    messages = [ChatMessage("user", "Tell me."), ChatMessage("assistant", DOCUMENT)]
    assert compress_messages(messages, policy()).messages == messages


def test_the_final_question_of_the_last_user_message_is_kept_verbatim() -> None:
    question = "  Do you deliver on Sundays?   We love you!  "
    content = DOCUMENT + "\n\n" + question
    result = compress_messages([ChatMessage("user", content)], policy())
    assert result.messages is not None
    assert result.messages[0].content.endswith("\n\n" + question)
    assert FILLER not in result.messages[0].content


def test_the_question_is_the_last_line_when_the_last_paragraph_is_long() -> None:
    text = "Intro.\n\n" + FILLER + " " + FILLER + "\nWhat is the price?"
    document, separator, question = split_question(text, policy())
    assert (separator, question) == ("\n", "What is the price?")
    assert document == "Intro.\n\n" + FILLER + " " + FILLER


def test_a_one_line_message_is_all_question() -> None:
    assert split_question("What is it?", policy()) == ("", "", "What is it?")


def test_warm_requests_have_no_question() -> None:
    result = compress_messages([ChatMessage("user", DOCUMENT)], policy(), warm=True)
    assert result.messages is not None and FILLER not in result.messages[0].content


def test_a_completions_prompt_keeps_its_last_paragraph() -> None:
    prompt = DOCUMENT + "\n\nQ: When is there no delivery? We love you!\nA:"
    result = compress_prompt(prompt, policy())
    assert result.prompt is not None
    assert result.prompt.endswith("\n\nQ: When is there no delivery? We love you!\nA:")
    assert result.prompt.count(FILLER) == 0 and result.saved_tokens > 0


QUESTIONS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=80).filter(
    lambda q: q.strip() and "\n" not in q
)


@settings(max_examples=200, deadline=None)
@given(QUESTIONS, QUESTIONS, st.sampled_from(["lossless", "facts"]))
def test_the_same_document_gives_the_same_compressed_prefix_whatever_the_question(
    first: str, second: str, mode: str
) -> None:
    def sent(question: str, in_user: bool) -> str:
        if in_user:
            result = compress_messages([ChatMessage("user", DOCUMENT + "\n\n" + question)], policy(mode))
        else:
            messages = [ChatMessage("system", DOCUMENT), ChatMessage("user", question)]
            result = compress_messages(messages, policy(mode))
        assert result.messages is not None
        return "\x00".join(m.content for m in result.messages).removesuffix(question)

    for in_user in (False, True):
        assert sent(first, in_user) == sent(second, in_user)


def test_a_content_sent_in_parts_is_compressed_part_by_part_and_keeps_its_breaks() -> None:
    question = "When is there no delivery?"
    content = DOCUMENT + DOCUMENT + question
    sent = ChatMessage("user", content, breaks=(len(DOCUMENT), 2 * len(DOCUMENT)))
    result = compress_messages([sent], policy())
    assert result.messages is not None
    (user,) = result.messages
    short = "## Prices\n\nEach loaf costs £3.10.\n\nWe do not deliver on Sundays."
    assert user.content == short + short + question
    assert user.breaks == (len(short), 2 * len(short))
