"""The report page: Markdown rendered by markdown-it-py, every user string escaped."""

from analysis.report import html_page


def test_user_strings_are_escaped_in_the_html():
    result = {"study": "<script>alert(1)</script>"}
    page = html_page(result, "# Study `<img src=x onerror=alert(1)>`\n\n| a | b |\n|---|---|\n| <b>x</b> | 1 |\n", {})
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>x</b>" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;x&lt;/b&gt;" in page
