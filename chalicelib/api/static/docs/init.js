// Starts Swagger UI on the API's own OpenAPI document (its URL is on the page: no inline script under the CSP).
window.addEventListener("load", () => {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapi,
    dom_id: "#swagger-ui",
    deepLinking: true,
    tryItOutEnabled: false,
  });
});
