// Markdown to DOM nodes, never to HTML: every piece of model text enters the page
// through createTextNode or textContent, so a reply holding <script> or
// <img onerror=...> shows as those characters. Links keep only http(s) and mailto.
//
// A small subset, enough for chat answers: paragraphs, headings, lists, block quotes,
// fenced and inline code, bold, italic, strikethrough, links, rules and simple tables.
// It is re-run on the whole answer as tokens stream in, so it must stay linear-ish:
// block parsing is one pass over the lines, inline parsing one regex scan per block.

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^\s{0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^\s{0,3}>\s?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
const TABLE_ROW = /^\s*\|.*\|\s*$/;
const TABLE_RULE = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;
const SAFE_URL = /^(https?:\/\/|mailto:)/i;
const MAX_DEPTH = 8;

// One alternative per inline form; tried left to right at each position.
const INLINE = new RegExp([
  "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)", // 1, 2: code span
  "\\*\\*(?=\\S)([^*]+?)\\*\\*", // 3: bold
  "(?<![\\w])__(?=\\S)([^_]+?)__(?![\\w])", // 4: bold (never inside a word: snake_case__names stay)
  "~~(?=\\S)([^~]+?)~~", // 5: strikethrough
  "\\*(?=[^\\s*])([^*]+?)\\*", // 6: italic
  "(?<![\\w])_(?=[^\\s_])([^_]+?)_(?![\\w])", // 7: italic
  "\\[([^\\[\\]\\n]+)\\]\\(\\s*([^\\s()]+)\\s*\\)", // 8, 9: link
  "(https?:\\/\\/[^\\s<>()\"']+[^\\s<>()\"'.,;:!?])", // 10: bare URL
].join("|"), "g");

function el(tag, className) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  return node;
}

function link(text, url, depth) {
  if (!SAFE_URL.test(url)) return [document.createTextNode(text === url ? text : `${text} (${url})`)];
  const a = el("a");
  a.href = url;
  a.rel = "noopener noreferrer nofollow";
  a.target = "_blank";
  a.append(...(text === url ? [document.createTextNode(text)] : inline(text, depth + 1)));
  return [a];
}

/** Inline Markdown in ``text`` as a list of nodes. */
export function inline(text, depth = 0) {
  if (depth > MAX_DEPTH) return [document.createTextNode(text)];
  const nodes = [];
  let last = 0;
  const re = new RegExp(INLINE.source, "g"); // a fresh one: inline() recurses
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) nodes.push(document.createTextNode(text.slice(last, m.index)));
    last = re.lastIndex;
    let node;
    if (m[2] !== undefined) {
      node = el("code");
      node.textContent = m[2];
    } else if (m[3] !== undefined || m[4] !== undefined) {
      node = el("strong");
      node.append(...inline(m[3] ?? m[4], depth + 1));
    } else if (m[5] !== undefined) {
      node = el("del");
      node.append(...inline(m[5], depth + 1));
    } else if (m[6] !== undefined || m[7] !== undefined) {
      node = el("em");
      node.append(...inline(m[6] ?? m[7], depth + 1));
    } else if (m[8] !== undefined) {
      nodes.push(...link(m[8], m[9], depth));
      continue;
    } else {
      nodes.push(...link(m[10], m[10], depth));
      continue;
    }
    nodes.push(node);
  }
  if (last < text.length) nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
}

function cells(row) {
  return row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((cell) => cell.trim());
}

/** Block Markdown in ``lines`` as a list of nodes. */
function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (!line.trim()) {
      i += 1;
    } else if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
      i += 1; // the closing fence (an unclosed one runs to the end: the answer is still streaming)
      const pre = el("pre");
      const code = el("code");
      if (m[2]) code.dataset.lang = m[2];
      code.textContent = body.join("\n");
      pre.append(code);
      out.push(pre);
    } else if ((m = HEADING.exec(line))) {
      // An answer's headings sit below the page's own h1-h3.
      const heading = el(`h${Math.min(6, m[1].length + 2)}`);
      heading.append(...inline(m[2], depth));
      out.push(heading);
      i += 1;
    } else if (RULE.test(line)) {
      out.push(el("hr"));
      i += 1;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        i += 1;
      }
      const quote = el("blockquote");
      quote.append(...(depth < MAX_DEPTH ? blocks(body, depth + 1) : [document.createTextNode(body.join("\n"))]));
      out.push(quote);
    } else if ((m = ITEM.exec(line))) {
      const ordered = /\d/.test(m[2]);
      const list = el(ordered ? "ol" : "ul");
      if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
      const indent = m[1].length;
      while (i < lines.length && (m = ITEM.exec(lines[i])) && /\d/.test(m[2]) === ordered && m[1].length <= indent + 1) {
        const body = [m[3]];
        i += 1;
        // Continuation lines and nested lists: indented deeper than the marker.
        while (i < lines.length && lines[i].trim() && /^\s+/.test(lines[i]) && lines[i].search(/\S/) > indent) {
          body.push(lines[i].slice(Math.min(lines[i].search(/\S/), indent + 2)));
          i += 1;
        }
        const item = el("li");
        if (body.length === 1 || depth >= MAX_DEPTH) {
          item.append(...inline(body.join("\n"), depth));
        } else {
          const [first, ...rest] = body;
          item.append(...inline(first, depth), ...blocks(rest, depth + 1));
        }
        list.append(item);
      }
      out.push(list);
    } else if (TABLE_ROW.test(line) && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])) {
      const table = el("table");
      const head = el("thead");
      const headRow = el("tr");
      for (const cell of cells(line)) {
        const th = el("th");
        th.append(...inline(cell, depth));
        headRow.append(th);
      }
      head.append(headRow);
      const body = el("tbody");
      i += 2;
      while (i < lines.length && TABLE_ROW.test(lines[i])) {
        const tr = el("tr");
        for (const cell of cells(lines[i])) {
          const td = el("td");
          td.append(...inline(cell, depth));
          tr.append(td);
        }
        body.append(tr);
        i += 1;
      }
      table.append(head, body);
      const wrap = el("div", "table-wrap"); // scrolls sideways on a narrow screen
      wrap.append(table);
      out.push(wrap);
    } else {
      const body = [line];
      i += 1;
      while (i < lines.length && lines[i].trim() && !startsBlock(lines[i])) body.push(lines[i++]);
      const p = el("p");
      p.append(...inline(body.join("\n"), depth));
      out.push(p);
    }
  }
  return out;
}

/** Replace the children of ``target`` with ``text`` rendered as Markdown. */
export function renderMarkdown(text, target) {
  target.replaceChildren(...blocks(String(text).replace(/\r\n?/g, "\n").split("\n"), 0));
}
