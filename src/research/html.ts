// HTML → what the research tools return. Pure functions over strings: no network here.
// Parsing is linkedom (a spec-minded DOM), readability is Mozilla's Readability; no regex on markup.

import { Readability } from '@mozilla/readability';
import { parseHTML } from 'linkedom';

/** Removed before Readability runs: never part of the readable text. */
const NOT_CONTENT = 'script, style, noscript, template, nav, [role="navigation"], iframe, object, embed, svg, canvas';

/** Elements that break a line in rendered text. */
const BLOCK_ELEMENTS = new Set([
  'ADDRESS', 'ARTICLE', 'ASIDE', 'BLOCKQUOTE', 'BR', 'CAPTION', 'DD', 'DIV', 'DL', 'DT', 'FIELDSET',
  'FIGCAPTION', 'FIGURE', 'FOOTER', 'FORM', 'H1', 'H2', 'H3', 'H4', 'H5', 'H6', 'HEADER', 'HR', 'LI',
  'MAIN', 'OL', 'P', 'PRE', 'SECTION', 'TABLE', 'TR', 'UL',
]);

const TEXT_NODE = 3;
const ELEMENT_NODE = 1;

// linkedom's types are loose; these are the few members we use.
interface DomNode {
  nodeType: number;
  nodeName: string;
  textContent: string | null;
  childNodes: ArrayLike<DomNode>;
}
interface DomElement extends DomNode {
  tagName: string;
  parentElement: DomElement | null;
  children: ArrayLike<DomElement>;
  closest(selector: string): DomElement | null;
  querySelectorAll(selector: string): ArrayLike<DomElement>;
  querySelector(selector: string): DomElement | null;
  getAttribute(name: string): string | null;
  remove(): void;
}
interface DomDocument {
  title: string;
  documentElement: DomElement | null;
  body: DomElement | null;
  querySelectorAll(selector: string): ArrayLike<DomElement>;
}

function parseDocument(html: string): DomDocument {
  const parsed = (parseHTML(html) as unknown as { document: DomDocument }).document;
  if (parsed.documentElement?.tagName === 'HTML') return parsed;
  // linkedom does not build <html>/<body> around a fragment the way browsers do; do it for it.
  return (parseHTML(`<!doctype html><html><head></head><body>${html}</body></html>`) as unknown as { document: DomDocument }).document;
}

/** Collapses whitespace inside lines and keeps at most one blank line between blocks. */
function tidyLines(raw: string): string {
  const lines = raw.split('\n').map((line) => line.replace(/\s+/g, ' ').trim());
  const kept: string[] = [];
  for (const line of lines) {
    if (line === '' && (kept.length === 0 || kept.at(-1) === '')) continue;
    kept.push(line);
  }
  return kept.join('\n').trim();
}

/** Rendered-ish text of a subtree: blocks on their own lines. Iterative, so deep nesting cannot overflow the stack. */
function renderText(root: DomNode): string {
  const parts: string[] = [];
  const stack: Array<DomNode | '\n'> = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (node === '\n') {
      parts.push('\n');
      continue;
    }
    if (node.nodeType === TEXT_NODE) {
      // Source line breaks are not rendered line breaks; only block boundaries are.
      parts.push((node.textContent ?? '').replace(/\s+/g, ' '));
      continue;
    }
    if (node.nodeType !== ELEMENT_NODE && node !== root) continue;
    const block = BLOCK_ELEMENTS.has(node.nodeName.toUpperCase());
    if (block) {
      parts.push('\n');
      stack.push('\n');
    }
    const children = Array.from(node.childNodes);
    for (let i = children.length - 1; i >= 0; i--) stack.push(children[i]!);
  }
  return tidyLines(parts.join(''));
}

export interface ReadablePage {
  title: string;
  text: string;
}

/** The readable text of a page: Readability's article, or the whole body if it finds none. */
export function readableText(html: string): ReadablePage {
  const document = parseDocument(html);
  for (const element of Array.from(document.querySelectorAll(NOT_CONTENT))) element.remove();
  const title = document.title.trim();
  // Readability mutates the document it is given, so read the fallback text first.
  const fallback = document.body ? renderText(document.body) : '';
  const article = new Readability(document).parse();
  if (!article?.content) return { title, text: fallback };
  const articleBody = parseDocument(article.content).body;
  const articleText = articleBody ? renderText(articleBody) : '';
  return { title: article.title?.trim() || title, text: articleText || fallback };
}

export interface HtmlTable {
  caption?: string;
  headers: string[];
  rows: string[][];
}

const MAX_SPAN = 100;

function cellText(cell: DomElement): string {
  return renderText(cell).replace(/\n+/g, ' ').trim();
}

function span(cell: DomElement, attribute: 'colspan' | 'rowspan'): number {
  const value = Number.parseInt(cell.getAttribute(attribute) ?? '1', 10);
  return Number.isFinite(value) && value >= 1 ? Math.min(value, MAX_SPAN) : 1;
}

/**
 * One table as headers and rows. Row- and colspans are expanded, so every row lines up with the
 * headers. Header row: the last row of <thead>, else a first row made only of <th> cells.
 */
function readTable(table: DomElement): HtmlTable {
  // Only this table's rows, not those of tables nested in its cells.
  const rows = Array.from(table.querySelectorAll('tr')).filter((tr) => tr.closest('table') === table);
  const grid: string[][] = rows.map(() => []);
  rows.forEach((tr, r) => {
    const line = grid[r]!;
    let column = 0;
    for (const cell of Array.from(tr.children)) {
      if (cell.tagName !== 'TD' && cell.tagName !== 'TH') continue;
      while (line[column] !== undefined) column++;
      const text = cellText(cell);
      const width = span(cell, 'colspan');
      const height = Math.min(span(cell, 'rowspan'), rows.length - r);
      for (let dr = 0; dr < height; dr++) {
        for (let dc = 0; dc < width; dc++) grid[r + dr]![column + dc] = text;
      }
      column += width;
    }
  });
  const filled = grid.map((line) => Array.from(line, (cell) => cell ?? ''));

  const inHead = rows.map((tr) => tr.parentElement?.tagName === 'THEAD');
  let headerIndex = inHead.lastIndexOf(true);
  if (headerIndex === -1 && rows[0] && Array.from(rows[0].children).every((cell) => cell.tagName === 'TH')) {
    headerIndex = rows[0].children.length > 0 ? 0 : -1;
  }
  const headers = headerIndex === -1 ? [] : filled[headerIndex]!;
  const body = filled.filter((line, i) => !inHead[i] && i !== headerIndex && line.length > 0);

  const caption = table.querySelector('caption');
  const captionText = caption && caption.closest('table') === table ? cellText(caption) : '';
  return captionText === '' ? { headers, rows: body } : { caption: captionText, headers, rows: body };
}

/** Every <table> in the page, in document order (nested tables included, each on its own). */
export function tablesFromHtml(html: string, limit = 50): HtmlTable[] {
  const document = parseDocument(html);
  return Array.from(document.querySelectorAll('table')).slice(0, limit).map(readTable);
}
